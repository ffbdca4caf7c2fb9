"""`chat`: team chat — users, channels with members, channel messages and direct messages."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from agent_env.envs import App, Ctx, ToolError, tool
from agent_env.envs.builtin.fields import Id, Ids, Text

CHANNEL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


class Chat(App):
    name = "chat"
    description = "Team chat: channels with members, channel messages and direct messages between users."
    schema = """
    CREATE TABLE users (
        handle TEXT PRIMARY KEY,             -- e.g. "sam"
        display_name TEXT NOT NULL,
        email TEXT
    );
    CREATE TABLE channels (
        name TEXT PRIMARY KEY,               -- e.g. "support" (shown as #support)
        created_at TEXT NOT NULL
    );
    CREATE TABLE channel_members (
        channel TEXT NOT NULL,
        handle TEXT NOT NULL,
        PRIMARY KEY (channel, handle)
    );
    CREATE TABLE channel_messages (
        id TEXT PRIMARY KEY,                 -- CM-0001
        channel TEXT NOT NULL,
        author TEXT NOT NULL,
        text TEXT NOT NULL,
        posted_at TEXT NOT NULL
    );
    CREATE TABLE direct_messages (
        id TEXT PRIMARY KEY,                 -- DM-0001
        sender TEXT NOT NULL,
        recipient TEXT NOT NULL,
        text TEXT NOT NULL,
        sent_at TEXT NOT NULL
    );
    """

    # -- helpers --

    def _user(self, handle: str) -> str:
        if self.db.execute("SELECT 1 FROM users WHERE handle = ?", (handle,)).fetchone() is None:
            known = ", ".join(r[0] for r in self.db.execute("SELECT handle FROM users ORDER BY handle"))
            raise ToolError(f"no user {handle!r} — known users: {known or '(none)'}")
        return handle

    def _members(self, channel: str) -> list[str]:
        return [
            r[0]
            for r in self.db.execute("SELECT handle FROM channel_members WHERE channel = ? ORDER BY handle", (channel,))
        ]

    def _channel(self, channel: str) -> str:
        name = channel.removeprefix("#")
        if self.db.execute("SELECT 1 FROM channels WHERE name = ?", (name,)).fetchone() is None:
            raise ToolError(f"no channel #{name} — list the channels with list_channels")
        return name

    @staticmethod
    def _text(text: str) -> str:
        if not text.strip():
            raise ToolError("text is empty — write the message")
        return text

    # -- tools --

    @tool(read_only=True)
    def list_channels(self) -> dict:
        """List every channel with its members and how many messages it holds."""
        rows = self.db.execute(
            "SELECT name, created_at, (SELECT COUNT(*) FROM channel_messages m WHERE m.channel = c.name) "
            "FROM channels c ORDER BY name"
        ).fetchall()
        return {
            "channels": [
                {"name": n, "members": self._members(n), "messages": count, "created_at": at} for n, at, count in rows
            ]
        }

    @tool
    def create_channel(self, ctx: Ctx, name: Id, members: Ids) -> dict:
        """Create a channel with its first members.

        Args:
            name: the channel's name: lowercase letters, digits, - and _, e.g. "refunds" (a leading # is dropped)
            members: handles of the users to add, e.g. ["sam", "lee"]
        """
        name = name.removeprefix("#")
        if not CHANNEL_NAME.match(name):
            raise ToolError(
                f"invalid channel name {name!r} — use lowercase letters, digits, - and _ "
                "(at most 40), e.g. 'billing-escalations'"
            )
        if self.db.execute("SELECT 1 FROM channels WHERE name = ?", (name,)).fetchone():
            raise ToolError(f"channel #{name} already exists — post to it with post_message or pick another name")
        if not members:
            raise ToolError("members is empty — a channel needs at least one member")
        handles = list(dict.fromkeys(self._user(m) for m in members))
        self.db.execute("INSERT INTO channels VALUES (?, ?)", (name, ctx.now_iso()))
        self.db.executemany("INSERT INTO channel_members VALUES (?, ?)", [(name, h) for h in handles])
        return {"name": name, "members": sorted(handles), "created_at": ctx.now_iso()}

    @tool
    def post_message(self, ctx: Ctx, channel: Id, author: Id, text: Text) -> dict:
        """Post a message to a channel. The author must be one of the channel's members.

        Args:
            channel: the channel's name, e.g. "support"
            author: the posting user's handle
            text: the message
        """
        name = self._channel(channel)
        self._user(author)
        members = self._members(name)
        if author not in members:
            raise ToolError(f"{author!r} is not a member of #{name} — post as one of its members: {', '.join(members)}")
        message = {
            "id": self.next_id("channel_messages", "CM-"),
            "channel": name,
            "author": author,
            "text": self._text(text),
            "posted_at": ctx.now_iso(),
        }
        self.db.execute("INSERT INTO channel_messages VALUES (:id, :channel, :author, :text, :posted_at)", message)
        return message

    @tool(read_only=True)
    def read_channel(self, channel: Id, limit: Annotated[int, Field(ge=1, le=200)] = 50) -> dict:
        """Read a channel's latest messages, oldest first.

        Args:
            channel: the channel's name, e.g. "support"
            limit: at most this many (the most recent) messages
        """
        name = self._channel(channel)
        messages = self.rows(
            "SELECT * FROM (SELECT id, author, text, posted_at, rowid AS r FROM channel_messages WHERE channel = ? "
            "ORDER BY posted_at DESC, rowid DESC LIMIT ?) ORDER BY posted_at, r",
            (name, limit),
        )
        for m in messages:
            del m["r"]
        return {"channel": name, "members": self._members(name), "messages": messages}

    @tool
    def send_direct_message(self, ctx: Ctx, sender: Id, recipient: Id, text: Text) -> dict:
        """Send a direct (private) message from one user to another.

        Args:
            sender: the sending user's handle
            recipient: the receiving user's handle
            text: the message
        """
        self._user(sender)
        self._user(recipient)
        if sender == recipient:
            raise ToolError("sender and recipient are the same user — direct messages go to someone else")
        message = {
            "id": self.next_id("direct_messages", "DM-"),
            "sender": sender,
            "recipient": recipient,
            "text": self._text(text),
            "sent_at": ctx.now_iso(),
        }
        self.db.execute("INSERT INTO direct_messages VALUES (:id, :sender, :recipient, :text, :sent_at)", message)
        return message

    @tool(read_only=True)
    def read_direct_messages(self, user: Id, other: Id) -> dict:
        """Read the direct-message conversation between two users, oldest first.

        Args:
            user: one user's handle
            other: the other user's handle
        """
        self._user(user)
        self._user(other)
        messages = self.rows(
            "SELECT id, sender, recipient, text, sent_at FROM direct_messages "
            "WHERE (sender = ?1 AND recipient = ?2) OR (sender = ?2 AND recipient = ?1) ORDER BY sent_at, rowid",
            (user, other),
        )
        return {"between": [user, other], "count": len(messages), "messages": messages}
