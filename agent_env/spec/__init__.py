"""Pydantic models of everything declared (tasks, steps) and of what a run records.

These models are the single source for validation, JSON Schema and docs. Modules here stay
import-light: the workflow sandbox imports some of them. This is the bottom layer: it imports nothing
of agent-env but itself and `agent_env.errors` (tests/test_lint.py holds it to that); checks that need the
installed step types, apps or bundles live in `agent_env.planning`.
"""
