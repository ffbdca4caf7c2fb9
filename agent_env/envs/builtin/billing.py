"""`billing`: customer accounts, orders with items, card charges and refunds."""

from __future__ import annotations

from typing import Any

from agent_env.envs import App, Ctx, ToolError, tool
from agent_env.envs.builtin.fields import Address, Id, Line

ORDER_COLUMNS = "id, account_id, status, total_cents, currency, verified, verified_by, verified_at, created_at"


class Billing(App):
    name = "billing"
    description = "Billing: customer accounts, their orders, the charges paying for them, and refunds."
    schema = """
    CREATE TABLE accounts (
        id TEXT PRIMARY KEY,                 -- ACC-001
        email TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE orders (
        id TEXT PRIMARY KEY,                 -- ORD-1001
        account_id TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('placed', 'shipped', 'delivered', 'cancelled')),
        total_cents INTEGER NOT NULL CHECK (total_cents >= 0),
        currency TEXT NOT NULL DEFAULT 'USD',
        verified INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (0, 1)),
        verified_by TEXT,
        verified_at TEXT,
        created_at TEXT NOT NULL
    );
    CREATE TABLE order_items (
        order_id TEXT NOT NULL,
        sku TEXT NOT NULL,
        description TEXT NOT NULL,
        quantity INTEGER NOT NULL CHECK (quantity > 0),
        unit_price_cents INTEGER NOT NULL CHECK (unit_price_cents >= 0),
        PRIMARY KEY (order_id, sku)
    );
    CREATE TABLE charges (
        id TEXT PRIMARY KEY,                 -- CH-5001
        order_id TEXT NOT NULL,
        amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
        status TEXT NOT NULL CHECK (status IN ('succeeded', 'pending', 'failed')),
        created_at TEXT NOT NULL
    );
    CREATE TABLE refunds (
        id TEXT PRIMARY KEY,                 -- RF-0001
        order_id TEXT NOT NULL,
        charge_id TEXT NOT NULL,
        amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
        reason TEXT NOT NULL,
        issued_by TEXT,                      -- the calling agent (or role), from the call's context
        created_at TEXT NOT NULL
    );
    """

    # -- helpers --

    def _order(self, order_id: str) -> dict[str, Any]:
        rows = self.rows(f"SELECT {ORDER_COLUMNS} FROM orders WHERE id = ?", (order_id,))
        if not rows:
            raise ToolError(f"no order {order_id!r} — list an account's orders with list_orders")
        order = rows[0]
        order["verified"] = bool(order["verified"])
        return order

    def _charges(self, order_id: str) -> list[dict[str, Any]]:
        """The order's charges, each with refunded_cents and refundable_cents (only succeeded charges refund)."""
        charges = self.rows(
            "SELECT c.id, c.amount_cents, c.status, c.created_at, "
            "COALESCE((SELECT SUM(r.amount_cents) FROM refunds r WHERE r.charge_id = c.id), 0) AS refunded_cents "
            "FROM charges c WHERE c.order_id = ? ORDER BY c.created_at, c.id",
            (order_id,),
        )
        for c in charges:
            c["refundable_cents"] = c["amount_cents"] - c["refunded_cents"] if c["status"] == "succeeded" else 0
        return charges

    # -- tools --

    @tool(read_only=True)
    def get_account(self, email: Address) -> dict:
        """Look up a customer's billing account by email, with the ids of its orders.

        Args:
            email: the customer's email address, e.g. "dana@example.com"
        """
        rows = self.rows(
            "SELECT id, email, name, created_at FROM accounts WHERE email = ? COLLATE NOCASE", (email.strip(),)
        )
        if not rows:
            raise ToolError(f"no account with email {email!r} — check the address (the customer may use another)")
        account = rows[0]
        account["order_ids"] = [
            r[0]
            for r in self.db.execute(
                "SELECT id FROM orders WHERE account_id = ? ORDER BY created_at, id", (account["id"],)
            )
        ]
        return account

    @tool(read_only=True)
    def list_orders(self, account_id: Id) -> dict:
        """List an account's orders, oldest first (get_order shows one with its items, charges and refunds).

        Args:
            account_id: the account's id, e.g. "ACC-001" (get_account gives it)
        """
        if self.db.execute("SELECT 1 FROM accounts WHERE id = ?", (account_id,)).fetchone() is None:
            raise ToolError(f"no account {account_id!r} — find an account's id with get_account(email)")
        orders = self.rows(
            f"SELECT {ORDER_COLUMNS} FROM orders WHERE account_id = ? ORDER BY created_at, id", (account_id,)
        )
        for o in orders:
            o["verified"] = bool(o["verified"])
        return {"account_id": account_id, "count": len(orders), "orders": orders}

    @tool(read_only=True)
    def get_order(self, order_id: Id) -> dict:
        """Read one order in full: its items, its charges (with how much of each can still be refunded) and
        its refunds.

        Args:
            order_id: the order's id, e.g. "ORD-1001"
        """
        order = self._order(order_id)
        order["items"] = self.rows(
            "SELECT sku, description, quantity, unit_price_cents FROM order_items WHERE order_id = ? ORDER BY rowid",
            (order_id,),
        )
        order["charges"] = self._charges(order_id)
        order["refunds"] = self.rows(
            "SELECT id, charge_id, amount_cents, reason, issued_by, created_at "
            "FROM refunds WHERE order_id = ? ORDER BY created_at, id",
            (order_id,),
        )
        order["charged_cents"] = sum(c["amount_cents"] for c in order["charges"] if c["status"] == "succeeded")
        order["refunded_cents"] = sum(r["amount_cents"] for r in order["refunds"])
        return order

    @tool
    def verify_order(self, ctx: Ctx, order_id: Id, verified_by: Address) -> dict:
        """Mark an order as verified: someone has checked its items, charges and customer.

        Args:
            order_id: the order's id
            verified_by: who checked it, e.g. "sam@acme.example"
        """
        order = self._order(order_id)
        if order["verified"]:
            raise ToolError(
                f"order {order_id} is already verified (by {order['verified_by']} at "
                f"{order['verified_at']}) — nothing to do"
            )
        if not verified_by.strip():
            raise ToolError("verified_by is empty — say who verified the order")
        self.db.execute(
            "UPDATE orders SET verified = 1, verified_by = ?, verified_at = ? WHERE id = ?",
            (verified_by, ctx.now_iso(), order_id),
        )
        return self._order(order_id)

    @tool(hidden=True)
    def issue_refund(self, ctx: Ctx, order_id: Id, charge_id: Id, amount_cents: int, reason: Line) -> dict:
        """Refund part or all of one charge of an order back to the customer's card.

        Args:
            order_id: the order's id, e.g. "ORD-1001"
            charge_id: the charge to refund, one of the order's charges, e.g. "CH-5002"
            amount_cents: how much to refund, in cents; at most what is still refundable on the charge
            reason: why, e.g. "duplicate charge"
        """
        self._order(order_id)
        charges = {c["id"]: c for c in self._charges(order_id)}
        if charge_id not in charges:
            owner = self.db.execute("SELECT order_id FROM charges WHERE id = ?", (charge_id,)).fetchone()
            where = f"it belongs to order {owner[0]}" if owner else "there is no such charge"
            raise ToolError(
                f"charge {charge_id!r} is not a charge of order {order_id} ({where}) — "
                f"get_order({order_id}) lists its charges: {', '.join(charges) or 'none'}"
            )
        charge = charges[charge_id]
        if charge["status"] != "succeeded":
            raise ToolError(
                f"charge {charge_id} has status {charge['status']}: nothing was collected, so there "
                "is nothing to refund — only succeeded charges can be refunded"
            )
        if charge["refundable_cents"] == 0:
            raise ToolError(
                f"charge {charge_id} is already fully refunded ({charge['refunded_cents']} cents) — "
                "nothing is left to refund on it"
            )
        if amount_cents <= 0:
            raise ToolError(f"amount_cents must be positive, got {amount_cents} — give the refund in cents")
        if amount_cents > charge["refundable_cents"]:
            raise ToolError(
                f"amount_cents {amount_cents} is more than the {charge['refundable_cents']} cents still "
                f"refundable on {charge_id} (charged {charge['amount_cents']}, already refunded "
                f"{charge['refunded_cents']}) — refund at most {charge['refundable_cents']}"
            )
        if not reason.strip():
            raise ToolError("reason is empty — say why the refund is issued")
        refund = {
            "id": self.next_id("refunds", "RF-"),
            "order_id": order_id,
            "charge_id": charge_id,
            "amount_cents": amount_cents,
            "reason": reason,
            "issued_by": ctx.agent or ctx.role,
            "created_at": ctx.now_iso(),
        }
        self.db.execute(
            "INSERT INTO refunds VALUES (:id, :order_id, :charge_id, :amount_cents, :reason, :issued_by, :created_at)",
            refund,
        )
        return {**refund, "charge_refundable_cents": charge["refundable_cents"] - amount_cents}
