"""`notes`: the smallest useful app — named notes with timestamps from the virtual clock."""

from __future__ import annotations

from agent_env.envs import App, Ctx, ToolError, tool
from agent_env.envs.builtin.fields import Id, Text


class Notes(App):
    name = "notes"
    description = "Named notes: write, read, list and delete them."
    schema = """
    CREATE TABLE notes (
        key TEXT PRIMARY KEY,
        text TEXT NOT NULL,
        author TEXT,
        updated_at TEXT NOT NULL
    );
    """

    @tool
    def write_note(self, ctx: Ctx, key: Id, text: Text) -> dict:
        """Write a note, replacing any note with the same key.

        Args:
            key: the note's name, e.g. "ada"
            text: the note's text
        """
        if not key.strip():
            raise ToolError("key must not be blank")
        self.db.execute(
            "INSERT INTO notes VALUES (?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
            "text = excluded.text, author = excluded.author, updated_at = excluded.updated_at",
            (key, text, ctx.agent or ctx.role, ctx.now_iso()),
        )
        return {"key": key, "updated_at": ctx.now_iso()}

    @tool(read_only=True)
    def read_note(self, key: Id) -> dict:
        """Read one note.

        Args:
            key: the note's name
        """
        row = self.db.execute("SELECT key, text, author, updated_at FROM notes WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise ToolError(f"no note named {key!r}")
        return dict(zip(("key", "text", "author", "updated_at"), row, strict=True))

    @tool(read_only=True)
    def list_notes(self) -> dict:
        """List every note, by key."""
        rows = self.db.execute("SELECT key, text FROM notes ORDER BY key").fetchall()
        return {"count": len(rows), "notes": {k: t for k, t in rows}}

    @tool
    def delete_note(self, key: Id) -> dict:
        """Delete a note.

        Args:
            key: the note's name
        """
        if self.db.execute("DELETE FROM notes WHERE key = ?", (key,)).rowcount == 0:
            raise ToolError(f"no note named {key!r}")
        return {"deleted": key}
