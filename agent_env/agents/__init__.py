"""Agents: anything that acts in an environment. A2A is the agent port.

Built-in agents (scripted, llm, persona, human) run behind A2A like any other; `agent_env.agents.sdk`
writes your own in a few lines.
"""
