"""An env type from a plugin (`agent_env.envs`): a meter agents read and bump; only a role naming it may set it."""

from __future__ import annotations

from agent_env.envs import App, tool


class Meter(App):
    name = "meter"
    description = "A meter agents read and bump."
    schema = "CREATE TABLE meter (id INTEGER PRIMARY KEY CHECK (id = 1), reading INTEGER NOT NULL);"

    def _reading(self) -> int:
        row = self.db.execute("SELECT reading FROM meter").fetchone()
        return row[0] if row else 0

    @tool
    def read(self) -> dict:
        """The meter's reading."""
        return {"reading": self._reading()}

    @tool
    def bump(self, by: int = 1) -> dict:
        """Add to the meter's reading.

        Args:
            by: how much to add
        """
        self.db.execute("INSERT INTO meter VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET reading = reading + ?", (by, by))
        return {"reading": self._reading()}

    @tool(hidden=True)
    def set_reading(self, value: int) -> dict:
        """Set the meter's reading (hidden: only a role that names it gets it).

        Args:
            value: the new reading
        """
        self.db.execute("INSERT INTO meter VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET reading = ?", (value, value))
        return {"reading": self._reading()}
