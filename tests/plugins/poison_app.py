"""An app for tests/test_poison.py: tools that return (or take) whatever a test asks, however large or absurd."""

from __future__ import annotations

from agent_env.envs import App, tool


class Poison(App):
    name = "poison"
    description = "Poison inputs: huge results, absurd numbers, e-mails of any size."
    schema = "CREATE TABLE sent (id INTEGER PRIMARY KEY, bytes INTEGER NOT NULL);"

    @tool(read_only=True)
    def big(self, megabytes: float) -> dict:
        """A result of `megabytes` MB."""
        return {"text": "x" * int(megabytes * 1_000_000)}

    @tool(read_only=True)
    def number(self, value: float) -> dict:
        """The number it is given, as a result."""
        return {"value": value}

    @tool
    def ping(self) -> dict:
        """Nothing: a call for triggers to match."""
        return {"pong": True}

    @tool
    def send_email(self, sender: str, to: list[str], body: str) -> dict:
        """Send an e-mail of any size."""
        cur = self.db.execute("INSERT INTO sent (bytes) VALUES (?)", (len(body),))
        return {"id": f"MSG-{cur.lastrowid}", "bytes": len(body)}
