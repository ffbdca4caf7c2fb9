"""Training libraries on trainer episodes: each adapter is a small module over the episode API
(`agent_env.episodes`) with its library as an extra, imported only by whoever uses that adapter.

Nothing here is imported by the CLI or the rooms below: an adapter is what a training script imports.
"""
