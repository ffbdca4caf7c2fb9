"""Temporal workflows. Keep these modules import-light: the workflow sandbox re-imports them per run."""
