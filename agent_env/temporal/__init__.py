"""Temporal plumbing: the embedded dev server, connecting a client, and building workers."""
