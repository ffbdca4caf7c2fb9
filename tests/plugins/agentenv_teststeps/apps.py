"""An env type from a plugin: found by its name through the `agent_env.envs` entry-point group."""

from __future__ import annotations

from agent_env.envs import App, tool


class Tally(App):
    name = "tally"
    description = "A counter agents add to."
    schema = "CREATE TABLE tally (id INTEGER PRIMARY KEY CHECK (id = 1), total INTEGER NOT NULL);"

    @tool
    def add(self, amount: int) -> dict:
        """Add to the tally.

        Args:
            amount: how much to add
        """
        self.db.execute(
            "INSERT INTO tally VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET total = total + ?", (amount, amount)
        )
        return {"total": self.db.execute("SELECT total FROM tally").fetchone()[0]}
