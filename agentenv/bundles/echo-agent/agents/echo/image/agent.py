"""The echo agent, written with agentenv's SDK: it answers each turn by repeating the prompt.

Served over A2A on $HOST:$PORT (set by the sandbox provider); its card names the URL it is fetched at,
so clients reach it through the container's published port.
"""

import os

from agentenv.agents.sdk import Agent, Turn, serve


class Echo(Agent):
    name = "echo"
    description = "Repeats what it is asked."

    async def answer(self, turn: Turn) -> str:
        # Tools would be `async with turn.tools() as tools: ...` when turn.mcp_url is reachable from here.
        return f"echo: {turn.prompt}"


if __name__ == "__main__":
    serve(Echo(), host=os.environ.get("HOST", "127.0.0.1"), port=int(os.environ.get("PORT", "8000")))
