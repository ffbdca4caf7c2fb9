"""agentenv: reinforcement-learning environments for AI agents, run durably on Temporal.

Kept import-light on purpose: the CLI imports this package on every invocation.
"""

__version__ = "0.1.0"
