"""The echo agent, written with agent-env's SDK: it answers each turn by repeating the prompt, and says how
many notes its environment holds (a tool call through the gateway).

Served over A2A on $HOST:$PORT (set by the sandbox provider); on all interfaces (in a container) its card
names a URL relative to itself, so clients reach it through the container's published port.
"""

import os

from agent_env.agents.sdk import Agent, Turn, serve


class Echo(Agent):
    name = "echo"
    description = "Repeats what it is asked."

    async def answer(self, turn: Turn) -> str:
        if not turn.mcp_url:  # deployed without an environment
            return f"echo: {turn.prompt}"
        async with turn.tools() as tools:  # the environment's tools, through the gateway, under its role
            notes = await tools.call("list_notes", {})
        return f"echo: {turn.prompt} ({notes['count']} notes)"


if __name__ == "__main__":
    serve(Echo(), host=os.environ.get("HOST", "127.0.0.1"), port=int(os.environ.get("PORT", "8000")))
