"""`helpdesk`: support tickets — customers, agents, tickets with comments, assignment and status."""

from __future__ import annotations

from typing import Any, Literal

from agent_env.envs import App, Ctx, ToolError, tool
from agent_env.envs.builtin.fields import Address, Id, Line, Text, is_address

Status = Literal["open", "pending", "solved", "closed"]
Priority = Literal["low", "normal", "high", "urgent"]
TICKET_COLUMNS = "id, customer_email, subject, priority, status, assignee, created_at, updated_at"


class Helpdesk(App):
    name = "helpdesk"
    description = "A support helpdesk: customer tickets with comments, assignment to agents, and status."
    schema = """
    CREATE TABLE customers (
        email TEXT PRIMARY KEY,
        name TEXT
    );
    CREATE TABLE agents (
        email TEXT PRIMARY KEY,
        name TEXT NOT NULL
    );
    CREATE TABLE tickets (
        id TEXT PRIMARY KEY,                 -- TCK-1001
        customer_email TEXT NOT NULL,
        subject TEXT NOT NULL,
        description TEXT NOT NULL,
        priority TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
        status TEXT NOT NULL CHECK (status IN ('open', 'pending', 'solved', 'closed')),
        assignee TEXT,                       -- an agent's email, or NULL
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE comments (
        id TEXT PRIMARY KEY,                 -- CMT-0001
        ticket_id TEXT NOT NULL,
        author TEXT NOT NULL,
        body TEXT NOT NULL,
        internal INTEGER NOT NULL DEFAULT 0 CHECK (internal IN (0, 1)),
        created_at TEXT NOT NULL
    );
    """

    # -- helpers --

    def _ticket(self, ticket_id: str) -> dict[str, Any]:
        rows = self.rows(f"SELECT {TICKET_COLUMNS}, description FROM tickets WHERE id = ?", (ticket_id,))
        if not rows:
            raise ToolError(f"no ticket {ticket_id!r} — find ticket ids with list_tickets")
        return rows[0]

    def _open_ticket(self, ticket_id: str) -> dict[str, Any]:
        """The ticket, which must not be closed (closed tickets are final)."""
        ticket = self._ticket(ticket_id)
        if ticket["status"] == "closed":
            raise ToolError(
                f"ticket {ticket_id} is closed, and closed tickets are final — create a new ticket "
                "with create_ticket for any follow-up"
            )
        return ticket

    def _agent(self, email: str) -> str:
        if self.db.execute("SELECT 1 FROM agents WHERE email = ?", (email,)).fetchone() is None:
            known = ", ".join(r[0] for r in self.db.execute("SELECT email FROM agents ORDER BY email"))
            raise ToolError(f"no agent {email!r} — known agents: {known or '(none)'}")
        return email

    def _touch(self, ctx: Ctx, ticket_id: str) -> None:
        self.db.execute("UPDATE tickets SET updated_at = ? WHERE id = ?", (ctx.now_iso(), ticket_id))

    # -- tools --

    @tool(read_only=True)
    def list_tickets(
        self, status: Status | None = None, assignee: Address | None = None, customer_email: Address | None = None
    ) -> dict:
        """List tickets (without their comments), oldest first, optionally filtered.

        Args:
            status: only tickets with this status
            assignee: only tickets assigned to this agent's email; "unassigned" for tickets nobody has
            customer_email: only tickets from this customer
        """
        where: list[str] = []
        args: list[str] = []
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if assignee == "unassigned":
            where.append("assignee IS NULL")
        elif assignee is not None:
            where.append("assignee = ?")
            args.append(self._agent(assignee))
        if customer_email is not None:
            if self.db.execute("SELECT 1 FROM customers WHERE email = ?", (customer_email,)).fetchone() is None:
                raise ToolError(
                    f"no customer with email {customer_email!r} — check the address, or list all "
                    "tickets without this filter"
                )
            where.append("customer_email = ?")
            args.append(customer_email)
        sql = f"SELECT {TICKET_COLUMNS} FROM tickets"
        if where:
            sql += " WHERE " + " AND ".join(where)
        tickets = self.rows(sql + " ORDER BY created_at, id", tuple(args))
        return {"count": len(tickets), "tickets": tickets}

    @tool(read_only=True)
    def get_ticket(self, ticket_id: Id) -> dict:
        """Read one ticket in full with all its comments (internal ones included), oldest first.

        Args:
            ticket_id: the ticket's id, e.g. "TCK-1004"
        """
        ticket = self._ticket(ticket_id)
        comments = self.rows(
            "SELECT id, author, body, internal, created_at FROM comments WHERE ticket_id = ? "
            "ORDER BY created_at, rowid",
            (ticket_id,),
        )
        for c in comments:
            c["internal"] = bool(c["internal"])
        name = self.db.execute("SELECT name FROM customers WHERE email = ?", (ticket["customer_email"],)).fetchone()
        return {**ticket, "customer_name": name[0] if name else None, "comments": comments}

    @tool
    def create_ticket(
        self, ctx: Ctx, customer_email: Address, subject: Line, description: Text, priority: Priority = "normal"
    ) -> dict:
        """Open a new ticket for a customer (a customer seen for the first time is added). It starts open and
        unassigned.

        Args:
            customer_email: the customer's email address
            subject: a one-line summary
            description: the customer's problem in full
            priority: how urgent it is
        """
        if not is_address(customer_email):
            raise ToolError(f"{customer_email!r} is not a valid email address — use the form name@domain.tld")
        if not subject.strip() or not description.strip():
            raise ToolError("subject and description must not be empty — summarise the problem in both")
        self.db.execute("INSERT OR IGNORE INTO customers (email) VALUES (?)", (customer_email,))
        ticket_id = self.next_id("tickets", "TCK-", first=1001)
        now = ctx.now_iso()
        self.db.execute(
            "INSERT INTO tickets VALUES (?, ?, ?, ?, ?, 'open', NULL, ?, ?)",
            (ticket_id, customer_email, subject, description, priority, now, now),
        )
        return self._ticket(ticket_id)

    @tool
    def assign_ticket(self, ctx: Ctx, ticket_id: Id, assignee: Address) -> dict:
        """Assign a ticket to an agent (replacing any previous assignee).

        Args:
            ticket_id: the ticket's id
            assignee: the agent's email, e.g. "sam@acme.example"
        """
        ticket = self._open_ticket(ticket_id)
        self._agent(assignee)
        if ticket["assignee"] == assignee:
            raise ToolError(f"ticket {ticket_id} is already assigned to {assignee}")
        self.db.execute("UPDATE tickets SET assignee = ? WHERE id = ?", (assignee, ticket_id))
        self._touch(ctx, ticket_id)
        return self._ticket(ticket_id)

    @tool
    def add_comment(self, ctx: Ctx, ticket_id: Id, author: Address, body: Text, internal: bool = False) -> dict:
        """Add a comment to a ticket: a public reply the customer sees, or an internal note for agents only.

        Args:
            ticket_id: the ticket's id
            author: the commenting agent's email, or the ticket's customer's email
            body: the comment's text
            internal: true for a note only agents see (customers cannot write internal notes)
        """
        ticket = self._open_ticket(ticket_id)
        is_agent = self.db.execute("SELECT 1 FROM agents WHERE email = ?", (author,)).fetchone() is not None
        if not is_agent and author != ticket["customer_email"]:
            raise ToolError(
                f"{author!r} can not comment on {ticket_id}: authors are agents or the ticket's "
                f"customer ({ticket['customer_email']})"
            )
        if internal and not is_agent:
            raise ToolError("only agents can write internal notes — set internal to false for a customer reply")
        if not body.strip():
            raise ToolError("body is empty — write the comment")
        comment = {
            "id": self.next_id("comments", "CMT-"),
            "ticket_id": ticket_id,
            "author": author,
            "body": body,
            "internal": internal,
            "created_at": ctx.now_iso(),
        }
        self.db.execute(
            "INSERT INTO comments VALUES (:id, :ticket_id, :author, :body, :internal, :created_at)",
            {**comment, "internal": int(internal)},
        )
        self._touch(ctx, ticket_id)
        return comment

    @tool
    def set_status(self, ctx: Ctx, ticket_id: Id, status: Status) -> dict:
        """Change a ticket's status: open (needs work) → pending (waiting on the customer) → solved → closed.
        Any change is allowed except reopening a closed ticket: closed is final.

        Args:
            ticket_id: the ticket's id
            status: the new status
        """
        ticket = self._ticket(ticket_id)
        if ticket["status"] == status:
            raise ToolError(f"ticket {ticket_id} is already {status}")
        self._open_ticket(ticket_id)
        self.db.execute("UPDATE tickets SET status = ? WHERE id = ?", (status, ticket_id))
        self._touch(ctx, ticket_id)
        return {**self._ticket(ticket_id), "previous_status": ticket["status"]}
