"""`mail`: mailboxes, messages and threads — send, list, read, search and follow conversations."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from agent_env.envs import App, Ctx, ToolError, tool
from agent_env.envs.builtin.fields import Address, Addresses, Id, Line, Text, is_address


class Mail(App):
    name = "mail"
    description = "Email: mailboxes with inbox and sent folders, messages grouped into threads."
    schema = """
    CREATE TABLE mailboxes (
        address TEXT PRIMARY KEY,
        display_name TEXT NOT NULL
    );
    CREATE TABLE messages (
        id TEXT PRIMARY KEY,                 -- MSG-0001
        thread_id TEXT NOT NULL,             -- THR-0001
        sender TEXT NOT NULL,
        subject TEXT NOT NULL,
        body TEXT NOT NULL,
        sent_at TEXT NOT NULL,
        in_reply_to TEXT,
        is_read INTEGER NOT NULL DEFAULT 0 CHECK (is_read IN (0, 1))
    );
    CREATE TABLE recipients (
        message_id TEXT NOT NULL,
        address TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('to', 'cc')),
        PRIMARY KEY (message_id, address)
    );
    """

    # -- helpers --

    def _mailbox(self, address: str) -> str:
        if self.db.execute("SELECT 1 FROM mailboxes WHERE address = ?", (address,)).fetchone() is None:
            raise ToolError(f"no mailbox {address!r} — list the known mailboxes with list_mailboxes")
        return address

    def _message(self, message_id: str, *, full: bool = True) -> dict[str, Any]:
        row = self.db.execute(
            "SELECT id, thread_id, sender, subject, body, sent_at, in_reply_to, is_read FROM messages WHERE id = ?",
            (message_id,),
        ).fetchone()
        if row is None:
            raise ToolError(f"no message {message_id!r} — find message ids with list_messages or search_messages")
        rcpt = self.db.execute(
            "SELECT address, kind FROM recipients WHERE message_id = ? ORDER BY rowid", (message_id,)
        ).fetchall()
        msg = {
            "id": row[0],
            "thread_id": row[1],
            "from": row[2],
            "to": [a for a, k in rcpt if k == "to"],
            "cc": [a for a, k in rcpt if k == "cc"],
            "subject": row[3],
            "sent_at": row[5],
            "in_reply_to": row[6],
            "read": bool(row[7]),
        }
        if full:
            msg["body"] = row[4]
        else:
            msg["preview"] = row[4] if len(row[4]) <= 120 else row[4][:117] + "..."
        return msg

    def _summaries(self, sql: str, args: tuple) -> list[dict[str, Any]]:
        return [self._message(r[0], full=False) for r in self.db.execute(sql, args).fetchall()]

    # -- tools --

    @tool(read_only=True)
    def list_mailboxes(self) -> dict:
        """List every known mailbox: its address, display name and unread inbox count."""
        rows = self.db.execute(
            "SELECT b.address, b.display_name, (SELECT COUNT(*) FROM recipients r JOIN messages m "
            "ON m.id = r.message_id WHERE r.address = b.address AND m.is_read = 0) "
            "FROM mailboxes b ORDER BY b.address"
        ).fetchall()
        return {"mailboxes": [{"address": a, "display_name": n, "unread": u} for a, n, u in rows]}

    @tool
    def send_email(
        self,
        ctx: Ctx,
        sender: Address,
        to: Addresses,
        body: Text,
        subject: Line | None = None,
        cc: Addresses = [],  # noqa: B006 (pydantic copies it)
        in_reply_to: Id | None = None,
    ) -> dict:
        """Send an email. A reply (in_reply_to) joins the original's thread; its subject defaults to "Re: ...".

        Args:
            sender: the sending mailbox's address; must be a known mailbox (see list_mailboxes)
            to: recipient addresses (at least one); any valid address, inside or outside the company
            body: the message text
            subject: the subject line; required unless replying
            cc: addresses to copy
            in_reply_to: id of the message this replies to, e.g. "MSG-0005"
        """
        self._mailbox(sender)
        if not to:
            raise ToolError("to is empty — give at least one recipient address")
        for address in [*to, *cc]:
            if not is_address(address):
                raise ToolError(f"{address!r} is not a valid email address — use the form name@domain.tld")
        if not body.strip():
            raise ToolError("body is empty — write the message text")
        if in_reply_to is not None:
            original = self._message(in_reply_to)
            thread_id = original["thread_id"]
            if subject is None or not subject.strip():
                old = original["subject"]
                subject = old if old.lower().startswith("re:") else f"Re: {old}"
        else:
            if subject is None or not subject.strip():
                raise ToolError("subject is required for a new message — only replies (in_reply_to) default it")
            thread_id = self.next_id("messages", "THR-", column="thread_id")
        message_id = self.next_id("messages", "MSG-")
        self.db.execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
            (message_id, thread_id, sender, subject, body, ctx.now_iso(), in_reply_to),
        )
        seen: set[str] = set()
        for kind, addresses in (("to", to), ("cc", cc)):
            for address in addresses:
                if address not in seen:
                    seen.add(address)
                    self.db.execute("INSERT INTO recipients VALUES (?, ?, ?)", (message_id, address, kind))
        return self._message(message_id)

    @tool(read_only=True)
    def list_messages(
        self,
        mailbox: Address,
        folder: Literal["inbox", "sent"] = "inbox",
        unread_only: bool = False,
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
    ) -> dict:
        """List a mailbox's messages, newest first, with a short preview of each body.

        Args:
            mailbox: the mailbox's address
            folder: "inbox" (messages it received) or "sent" (messages it sent)
            unread_only: only messages not yet read
            limit: at most this many messages
        """
        self._mailbox(mailbox)
        if folder == "inbox":
            where = "id IN (SELECT message_id FROM recipients WHERE address = ?)"
        else:
            where = "sender = ?"
        if unread_only:
            where += " AND is_read = 0"
        messages = self._summaries(
            f"SELECT id FROM messages WHERE {where} ORDER BY sent_at DESC, rowid DESC LIMIT ?", (mailbox, limit)
        )
        return {"mailbox": mailbox, "folder": folder, "count": len(messages), "messages": messages}

    @tool
    def read_message(self, message_id: Id) -> dict:
        """Read one message in full, and mark it read.

        Args:
            message_id: the message's id, e.g. "MSG-0005"
        """
        message = self._message(message_id)
        self.db.execute("UPDATE messages SET is_read = 1 WHERE id = ?", (message_id,))
        return {**message, "read": True}

    @tool(read_only=True)
    def search_messages(self, query: Line, mailbox: Address | None = None) -> dict:
        """Find messages whose subject, body or sender contains the query (case-insensitive), newest first.

        Args:
            query: the text to look for, e.g. "refund"
            mailbox: only messages this mailbox sent or received
        """
        if not query.strip():
            raise ToolError("query is empty — give some text to search for")
        sql = (
            "SELECT id FROM messages WHERE (instr(lower(subject), lower(?1)) OR instr(lower(body), lower(?1)) "
            "OR instr(lower(sender), lower(?1)))"
        )
        args: tuple = (query.strip(),)
        if mailbox is not None:
            self._mailbox(mailbox)
            sql += " AND (sender = ?2 OR id IN (SELECT message_id FROM recipients WHERE address = ?2))"
            args += (mailbox,)
        messages = self._summaries(sql + " ORDER BY sent_at DESC, rowid DESC", args)
        return {"query": query, "count": len(messages), "messages": messages}

    @tool(read_only=True)
    def get_thread(self, thread_id: Id) -> dict:
        """Read a whole conversation: every message of a thread in full, oldest first.

        Args:
            thread_id: the thread's id, e.g. "THR-0004" (every message shows its thread_id)
        """
        ids = self.db.execute(
            "SELECT id FROM messages WHERE thread_id = ? ORDER BY sent_at, rowid", (thread_id,)
        ).fetchall()
        if not ids:
            raise ToolError(
                f"no thread {thread_id!r} — a message's thread_id is shown by list_messages and read_message"
            )
        messages = [self._message(r[0]) for r in ids]
        return {"thread_id": thread_id, "subject": messages[0]["subject"], "count": len(messages), "messages": messages}
