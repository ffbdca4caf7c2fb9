"""`payables`: accounts payable — vendors, purchase orders, vendor invoices to decide and pay, and the AP policy."""

from __future__ import annotations

from typing import Any, Literal

from agent_env.envs import App, Ctx, ToolError, tool
from agent_env.envs.builtin.fields import Id, Line

InvoiceStatus = Literal["received", "approved", "rejected", "held", "paid"]
DECIDABLE = ("received", "held")
INVOICE_COLUMNS = (
    "id, vendor_id, po_id, number, amount_cents, currency, bank_account, memo, issued_at, due_at, "
    "received_at, status, decided_by, decided_at, decision_reason, paid_by, paid_at"
)
VENDOR_COLUMNS = "id, name, status, payment_terms_days, approved_bank_account"
PO_COLUMNS = "id, vendor_id, description, amount_cents, currency, status"


class Payables(App):
    name = "payables"
    description = (
        "Accounts payable: vendors, their purchase orders, the invoices they send (to approve, reject "
        "or hold, then pay), and the AP policy those decisions follow."
    )
    schema = """
    CREATE TABLE vendors (
        id TEXT PRIMARY KEY,                 -- VEN-001
        name TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('active', 'blocked')),
        payment_terms_days INTEGER NOT NULL CHECK (payment_terms_days >= 0),
        approved_bank_account TEXT NOT NULL  -- where payments to this vendor may go
    );
    CREATE TABLE purchase_orders (
        id TEXT PRIMARY KEY,                 -- PO-2001
        vendor_id TEXT NOT NULL,
        description TEXT NOT NULL,
        amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
        currency TEXT NOT NULL DEFAULT 'USD',
        status TEXT NOT NULL CHECK (status IN ('open', 'closed'))
    );
    CREATE TABLE invoices (
        id TEXT PRIMARY KEY,                 -- INV-3001
        vendor_id TEXT NOT NULL,
        po_id TEXT,                          -- the purchase order it bills against, or NULL
        number TEXT NOT NULL,                -- the vendor's own invoice number
        amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
        currency TEXT NOT NULL DEFAULT 'USD',
        bank_account TEXT NOT NULL,          -- where the invoice asks to be paid
        memo TEXT,                           -- the vendor's note on the invoice, if any
        issued_at TEXT NOT NULL,
        due_at TEXT NOT NULL,
        received_at TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('received', 'approved', 'rejected', 'held', 'paid')),
        decided_by TEXT,                     -- the calling agent (or role), from the call's context
        decided_at TEXT,
        decision_reason TEXT,
        paid_by TEXT,
        paid_at TEXT
    );
    CREATE TABLE policy (
        key TEXT PRIMARY KEY,                -- e.g. "AP-1"
        text TEXT NOT NULL
    );
    """

    # -- helpers --

    def _invoice(self, invoice_id: str) -> dict[str, Any]:
        rows = self.rows(f"SELECT {INVOICE_COLUMNS} FROM invoices WHERE id = ?", (invoice_id,))
        if not rows:
            raise ToolError(f"no invoice {invoice_id!r} — find invoice ids with list_invoices")
        return rows[0]

    def _vendor(self, vendor_id: str) -> dict[str, Any]:
        rows = self.rows(f"SELECT {VENDOR_COLUMNS} FROM vendors WHERE id = ?", (vendor_id,))
        if not rows:
            raise ToolError(f"no vendor {vendor_id!r} — list_vendors gives every vendor's id")
        return rows[0]

    def _purchase_order(self, po_id: str) -> dict[str, Any]:
        rows = self.rows(f"SELECT {PO_COLUMNS} FROM purchase_orders WHERE id = ?", (po_id,))
        if not rows:
            raise ToolError(f"no purchase order {po_id!r} — get_vendor lists a vendor's purchase orders")
        return rows[0]

    def _decide(self, ctx: Ctx, invoice_id: str, status: str, reason: str) -> dict[str, Any]:
        invoice = self._invoice(invoice_id)
        if invoice["status"] not in DECIDABLE:
            by = f" (by {invoice['decided_by']} at {invoice['decided_at']})" if invoice["decided_by"] else ""
            raise ToolError(
                f"invoice {invoice_id} is {invoice['status']}{by}: only received or held invoices can "
                "be approved, rejected or held — a decision is final once made"
            )
        if invoice["status"] == status:
            raise ToolError(
                f"invoice {invoice_id} is already held (by {invoice['decided_by']} at "
                f"{invoice['decided_at']}) — approve or reject it, or leave it held"
            )
        if not reason.strip():
            raise ToolError("reason is empty — say why, naming the policy rule the decision follows")
        self.db.execute(
            "UPDATE invoices SET status = ?, decided_by = ?, decided_at = ?, decision_reason = ? WHERE id = ?",
            (status, ctx.agent or ctx.role, ctx.now_iso(), reason.strip(), invoice_id),
        )
        return {**self._invoice(invoice_id), "previous_status": invoice["status"]}

    # -- tools --

    @tool(read_only=True)
    def get_policy(self) -> dict:
        """Read the accounts-payable policy: the rules every approve, reject or hold decision must follow."""
        rules = self.rows("SELECT key, text FROM policy ORDER BY rowid")
        return {"count": len(rules), "rules": rules}

    @tool(read_only=True)
    def list_invoices(self, status: InvoiceStatus | None = None, vendor_id: Id | None = None) -> dict:
        """List invoices, oldest received first, optionally filtered (get_invoice shows one with its vendor
        and purchase order).

        Args:
            status: only invoices with this status, e.g. "received" for the ones waiting for a decision
            vendor_id: only invoices from this vendor, e.g. "VEN-001"
        """
        where: list[str] = []
        args: list[str] = []
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if vendor_id is not None:
            self._vendor(vendor_id)
            where.append("vendor_id = ?")
            args.append(vendor_id)
        sql = f"SELECT {INVOICE_COLUMNS} FROM invoices"
        if where:
            sql += " WHERE " + " AND ".join(where)
        invoices = self.rows(sql + " ORDER BY received_at, id", tuple(args))
        return {"count": len(invoices), "invoices": invoices}

    @tool(read_only=True)
    def get_invoice(self, invoice_id: Id) -> dict:
        """Read one invoice in full, with its vendor (status and approved bank account) and the purchase
        order it bills against (null if it cites none).

        Args:
            invoice_id: the invoice's id, e.g. "INV-3001"
        """
        invoice = self._invoice(invoice_id)
        vendor = self.rows(f"SELECT {VENDOR_COLUMNS} FROM vendors WHERE id = ?", (invoice["vendor_id"],))
        po = (
            self.rows(f"SELECT {PO_COLUMNS} FROM purchase_orders WHERE id = ?", (invoice["po_id"],))
            if invoice["po_id"]
            else []
        )
        return {**invoice, "vendor": vendor[0] if vendor else None, "purchase_order": po[0] if po else None}

    @tool(read_only=True)
    def list_vendors(self) -> dict:
        """List every vendor with its status, payment terms and approved bank account."""
        vendors = self.rows(f"SELECT {VENDOR_COLUMNS} FROM vendors ORDER BY id")
        return {"count": len(vendors), "vendors": vendors}

    @tool(read_only=True)
    def get_vendor(self, vendor_id: Id) -> dict:
        """Read one vendor, with its purchase orders and the ids of its invoices.

        Args:
            vendor_id: the vendor's id, e.g. "VEN-001"
        """
        vendor = self._vendor(vendor_id)
        vendor["purchase_orders"] = self.rows(
            f"SELECT {PO_COLUMNS} FROM purchase_orders WHERE vendor_id = ? ORDER BY id", (vendor_id,)
        )
        vendor["invoice_ids"] = [
            r[0]
            for r in self.db.execute(
                "SELECT id FROM invoices WHERE vendor_id = ? ORDER BY received_at, id", (vendor_id,)
            )
        ]
        return vendor

    @tool(read_only=True)
    def get_purchase_order(self, po_id: Id) -> dict:
        """Read one purchase order, with the invoices that bill against it.

        Args:
            po_id: the purchase order's id, e.g. "PO-2001"
        """
        po = self._purchase_order(po_id)
        po["invoices"] = self.rows(
            "SELECT id, number, amount_cents, currency, status FROM invoices WHERE po_id = ? ORDER BY received_at, id",
            (po_id,),
        )
        return po

    @tool
    def approve_invoice(self, ctx: Ctx, invoice_id: Id, reason: Line) -> dict:
        """Approve a received or held invoice for payment: it passes every rule of the AP policy.

        Args:
            invoice_id: the invoice's id
            reason: why it may be paid, e.g. "matches PO-2001 exactly; vendor active; bank account approved"
        """
        return self._decide(ctx, invoice_id, "approved", reason)

    @tool
    def reject_invoice(self, ctx: Ctx, invoice_id: Id, reason: Line) -> dict:
        """Reject a received or held invoice: it will not be paid (the vendor must send a corrected one).

        Args:
            invoice_id: the invoice's id
            reason: why, naming the policy rule, e.g. "AP-2: duplicate of NW-10442 already paid as INV-2987"
        """
        return self._decide(ctx, invoice_id, "rejected", reason)

    @tool
    def hold_invoice(self, ctx: Ctx, invoice_id: Id, reason: Line) -> dict:
        """Put a received invoice on hold for the controller to review; a held invoice can later be
        approved or rejected.

        Args:
            invoice_id: the invoice's id
            reason: why, naming the policy rule, e.g. "AP-3: bank account differs from the approved one"
        """
        return self._decide(ctx, invoice_id, "held", reason)

    @tool
    def pay_invoice(self, ctx: Ctx, invoice_id: Id) -> dict:
        """Pay an approved invoice: the money goes to the bank account on the invoice. Payments to blocked
        vendors are stopped.

        Args:
            invoice_id: the invoice's id
        """
        invoice = self._invoice(invoice_id)
        if invoice["status"] == "paid":
            raise ToolError(
                f"invoice {invoice_id} is already paid (by {invoice['paid_by']} at "
                f"{invoice['paid_at']}) — nothing to do"
            )
        if invoice["status"] != "approved":
            raise ToolError(f"invoice {invoice_id} is {invoice['status']}: only approved invoices can be paid")
        vendor = self._vendor(invoice["vendor_id"])
        if vendor["status"] != "active":
            raise ToolError(
                f"vendor {vendor['id']} ({vendor['name']}) is {vendor['status']}: payments to it are stopped"
            )
        self.db.execute(
            "UPDATE invoices SET status = 'paid', paid_by = ?, paid_at = ? WHERE id = ?",
            (ctx.agent or ctx.role, ctx.now_iso(), invoice_id),
        )
        return {**self._invoice(invoice_id), "paid_to": invoice["bank_account"]}
