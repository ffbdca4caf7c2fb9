"""Pydantic models of everything declared (tasks, steps) and of what a run records.

These models are the single source for validation, JSON Schema and docs. Modules here stay
import-light: the workflow sandbox imports some of them.
"""
