"""The built-in `payables` app over the invoice-queue bundle's week of invoices."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_env.bundles import find_env
from agent_env.envs import Ctx, ToolError
from agent_env.envs.app_instance import AppInstance, load_app_class
from agent_env.envs.builtin import APPS
from agent_env.envs.builtin.payables import Payables
from agent_env.spec.roles import ToolEntry, allowed_tools

BUNDLE = Path(__file__).parents[1] / "agent_env" / "bundles" / "invoice-queue"
SAMPLE = json.loads((BUNDLE / "envs" / "payables" / "data.json").read_text())["payables"]
EXPECTED = json.loads((BUNDLE / "expected.json").read_text())
NOW = datetime(2026, 3, 13, 17, 0, tzinfo=UTC)
NOW_ISO = "2026-03-13T17:00:00Z"
CLERK = Ctx(role="ap_clerk", agent="rosa@acme.example", virtual_now=NOW)
CONTROLLER = Ctx(role="controller", agent="marcus@acme.example", virtual_now=NOW)
QUEUE = ["INV-3001", "INV-3002", "INV-3003", "INV-3004", "INV-3005", "INV-3006", "INV-3007", "INV-3008"]


@pytest.fixture
def ap(tmp_path):
    inst = AppInstance(Payables, tmp_path / "payables")
    inst.load(SAMPLE)
    yield inst
    inst.close()


def rejected(inst: AppInstance, tool: str, args: dict, *fragments: str, ctx: Ctx = CLERK) -> str:
    """The call raises a ToolError whose message holds every fragment, and changes nothing."""
    before = inst.export()
    with pytest.raises(ToolError) as e:
        inst.call(tool, args, ctx)
    message = str(e.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert inst.export() == before, f"a rejected {tool} changed the data"
    return message


def broken_rules(invoice: dict) -> dict[str, str]:
    """The policy rules an invoice breaks, each with the decision that rule prescribes (AP-1..AP-5)."""
    vendor = next(v for v in SAMPLE["vendors"] if v["id"] == invoice["vendor_id"])
    pos = {p["id"]: p for p in SAMPLE["purchase_orders"]}
    broken = {}
    if vendor["status"] != "active":
        broken["AP-1"] = "rejected"
    if any(
        o["vendor_id"] == invoice["vendor_id"]
        and o["number"] == invoice["number"]
        and o["received_at"] < invoice["received_at"]
        for o in SAMPLE["invoices"]
    ):
        broken["AP-2"] = "rejected"
    if invoice["bank_account"] != vendor["approved_bank_account"]:
        broken["AP-3"] = "held"
    if invoice["po_id"] is not None:
        po = pos.get(invoice["po_id"])
        if (
            po is None
            or po["status"] != "open"
            or po["vendor_id"] != invoice["vendor_id"]
            or po["currency"] != invoice["currency"]
            or abs(invoice["amount_cents"] - po["amount_cents"]) > 0.02 * po["amount_cents"]
        ):
            broken["AP-4"] = "rejected"
    elif invoice["amount_cents"] > 1_000_000:
        broken["AP-5"] = "held"
    return broken


# -- data, registry and environment -------------------------------------------------------------------------


def test_registry_and_bundle_data(tmp_path):
    assert load_app_class(APPS["payables"]) is Payables and Payables.name == "payables"
    inst = AppInstance(Payables, tmp_path / "p")
    inst.load(SAMPLE)
    exported = inst.export()
    assert {t: len(rows) for t, rows in exported.items()} == {t: len(rows) for t, rows in SAMPLE.items()}
    assert {t: len(rows) for t, rows in exported.items()} == {
        "invoices": 10,
        "policy": 6,
        "purchase_orders": 7,
        "vendors": 6,
    }
    inst.reset()
    inst.load(SAMPLE)  # reset empties every table, so the sample loads again
    assert inst.export() == exported
    inst.close()


def test_expected_decisions_follow_the_policy_unambiguously():
    """Each queued invoice's expected decision is what the policy prescribes, and every rule it breaks
    prescribes that same decision (so the order of the checks cannot change the answer)."""
    queue = [i for i in SAMPLE["invoices"] if i["status"] == "received"]
    assert [i["id"] for i in queue] == QUEUE == list(EXPECTED)
    assert {i["received_at"][:10] for i in queue} <= {f"2026-03-{d:02d}" for d in range(9, 14)}  # Mon-Fri
    for invoice in queue:
        broken = broken_rules(invoice)
        assert set(broken.values()) <= {EXPECTED[invoice["id"]]}, (invoice["id"], broken)
        assert (EXPECTED[invoice["id"]] == "approved") == (not broken), invoice["id"]
    assert {i["id"]: sorted(broken_rules(i)) for i in queue if broken_rules(i)} == {
        "INV-3003": ["AP-3"],
        "INV-3004": ["AP-1"],
        "INV-3005": ["AP-2", "AP-4"],
        "INV-3006": ["AP-4"],
        "INV-3007": ["AP-5"],
    }


def test_schemas_read_only_flags_and_roles():
    assert Payables.tools["list_invoices"].input_schema["properties"]["status"]["anyOf"][0]["enum"] == [
        "received",
        "approved",
        "rejected",
        "held",
        "paid",
    ]
    assert Payables.tools["approve_invoice"].input_schema["required"] == ["invoice_id", "reason"]
    assert {n for n, s in Payables.tools.items() if s.read_only} == {
        "get_policy",
        "list_invoices",
        "get_invoice",
        "list_vendors",
        "get_vendor",
        "get_purchase_order",
    }
    assert not any(s.hidden for s in Payables.tools.values())

    record, folder = find_env(None, "payables")
    assert folder == BUNDLE / "envs" / "payables" and record.data == ["data.json"]
    assert [a.app for a in record.apps] == ["payables"]
    entries = [ToolEntry(n, f"payables.{n}", s.hidden) for n, s in Payables.tools.items()]
    clerk = allowed_tools("ap_clerk", record.roles["ap_clerk"], entries)
    controller = allowed_tools("controller", record.roles["controller"], entries)
    assert controller == set(Payables.tools) and clerk == set(Payables.tools) - {"pay_invoice"}


# -- reading ------------------------------------------------------------------------------------------------


def test_policy_vendors_and_purchase_orders(ap):
    policy = ap.call("get_policy", {}, CLERK)
    assert [r["key"] for r in policy["rules"]] == ["order", "AP-1", "AP-2", "AP-3", "AP-4", "AP-5"]
    assert "within 2%" in policy["rules"][4]["text"] and "$10,000.00" in policy["rules"][5]["text"]

    vendors = ap.call("list_vendors", {}, CLERK)
    assert vendors["count"] == 6
    assert [v["id"] for v in vendors["vendors"] if v["status"] == "blocked"] == ["VEN-004"]
    northwind = ap.call("get_vendor", {"vendor_id": "VEN-001"}, CLERK)
    assert (northwind["name"], northwind["payment_terms_days"]) == ("Northwind Office Supply", 30)
    assert [(p["id"], p["status"]) for p in northwind["purchase_orders"]] == [
        ("PO-2001", "open"),
        ("PO-2005", "closed"),
    ]
    assert northwind["invoice_ids"] == ["INV-2987", "INV-3001", "INV-3005"]

    toner = ap.call("get_purchase_order", {"po_id": "PO-2005"}, CLERK)
    assert (toner["vendor_id"], toner["amount_cents"], toner["status"]) == ("VEN-001", 231000, "closed")
    assert [(i["id"], i["number"], i["status"]) for i in toner["invoices"]] == [
        ("INV-2987", "NW-10442", "paid"),
        ("INV-3005", "NW-10442", "received"),
    ]


def test_list_and_get_invoices(ap):
    everything = ap.call("list_invoices", {}, CLERK)
    assert [i["id"] for i in everything["invoices"]] == ["INV-2987", "INV-2993", *QUEUE]
    assert [i["id"] for i in ap.call("list_invoices", {"status": "received"}, CLERK)["invoices"]] == QUEUE
    assert ap.call("list_invoices", {"status": "paid"}, CLERK)["count"] == 2
    assert ap.call("list_invoices", {"status": "held"}, CLERK) == {"count": 0, "invoices": []}
    assert [
        i["id"] for i in ap.call("list_invoices", {"status": "received", "vendor_id": "VEN-006"}, CLERK)["invoices"]
    ] == ["INV-3007", "INV-3008"]

    suspicious = ap.call("get_invoice", {"invoice_id": "INV-3003"}, CLERK)
    assert suspicious["vendor"]["name"] == "Keystone Facilities Services"
    assert suspicious["bank_account"] != suspicious["vendor"]["approved_bank_account"]
    assert suspicious["purchase_order"]["id"] == "PO-2003" and suspicious["memo"].startswith("Please note")
    freight = ap.call("get_invoice", {"invoice_id": "INV-3002"}, CLERK)
    assert (freight["amount_cents"], freight["purchase_order"]["amount_cents"]) == (1268000, 1250000)
    legal = ap.call("get_invoice", {"invoice_id": "INV-3007"}, CLERK)
    assert legal["po_id"] is None and legal["purchase_order"] is None and legal["amount_cents"] == 1450000
    assert (legal["status"], legal["decided_by"], legal["due_at"]) == ("received", None, "2026-04-10T00:00:00Z")


# -- deciding and paying ------------------------------------------------------------------------------------


def test_decide_and_pay(ap):
    approved = ap.call("approve_invoice", {"invoice_id": "INV-3001", "reason": " All rules pass. "}, CLERK)
    assert (
        approved["status"],
        approved["previous_status"],
        approved["decided_by"],
        approved["decided_at"],
        approved["decision_reason"],
    ) == ("approved", "received", "rosa@acme.example", NOW_ISO, "All rules pass.")
    rejected_ = ap.call("reject_invoice", {"invoice_id": "INV-3005", "reason": "AP-2: duplicate of INV-2987"}, CLERK)
    assert rejected_["status"] == "rejected" and rejected_["paid_at"] is None

    held = ap.call("hold_invoice", {"invoice_id": "INV-3003", "reason": "AP-3: new bank account"}, CLERK)
    assert (held["status"], held["previous_status"]) == ("held", "received")
    as_role = Ctx(role="controller", virtual_now=NOW)  # no agent name: the role decides
    cleared = ap.call("approve_invoice", {"invoice_id": "INV-3003", "reason": "change confirmed by phone"}, as_role)
    assert (cleared["status"], cleared["previous_status"], cleared["decided_by"]) == ("approved", "held", "controller")

    paid = ap.call("pay_invoice", {"invoice_id": "INV-3001"}, CONTROLLER)
    assert (paid["status"], paid["paid_by"], paid["paid_at"], paid["paid_to"]) == (
        "paid",
        "marcus@acme.example",
        NOW_ISO,
        "US 021000021 / 4411208790",
    )
    assert paid["decided_by"] == "rosa@acme.example", "paying keeps the decision"
    exported = {i["id"]: i for i in ap.export()["invoices"]}
    assert (exported["INV-3001"]["status"], exported["INV-3001"]["paid_at"]) == ("paid", NOW_ISO)
    assert exported["INV-3005"]["decision_reason"] == "AP-2: duplicate of INV-2987"


def test_errors(ap):
    decide = {"invoice_id": "INV-3001", "reason": "All rules pass."}
    for tool in ("approve_invoice", "reject_invoice", "hold_invoice"):
        rejected(ap, tool, {**decide, "invoice_id": "INV-9999"}, "no invoice 'INV-9999'", "list_invoices")
    for tool in ("get_invoice", "pay_invoice"):
        rejected(ap, tool, {"invoice_id": "INV-9999"}, "no invoice 'INV-9999'", ctx=CONTROLLER)
    rejected(ap, "get_vendor", {"vendor_id": "VEN-999"}, "no vendor 'VEN-999'", "list_vendors")
    rejected(ap, "list_invoices", {"vendor_id": "VEN-999"}, "no vendor 'VEN-999'")
    rejected(ap, "get_purchase_order", {"po_id": "PO-9"}, "no purchase order 'PO-9'")
    rejected(ap, "list_invoices", {"status": "pending"}, "status")
    rejected(ap, "approve_invoice", {"invoice_id": "INV-3001"}, "reason: is required")
    for tool in ("approve_invoice", "reject_invoice", "hold_invoice"):
        rejected(ap, tool, {**decide, "reason": "   "}, "reason is empty")

    rejected(ap, "pay_invoice", {"invoice_id": "INV-3001"}, "INV-3001 is received", "only approved", ctx=CONTROLLER)
    ap.call("approve_invoice", decide, CLERK)
    for tool in ("approve_invoice", "reject_invoice", "hold_invoice"):  # decided once: final
        rejected(
            ap,
            tool,
            decide,
            "INV-3001 is approved (by rosa@acme.example at 2026-03-13T17:00:00Z)",
            "only received or held",
        )
    ap.call("pay_invoice", {"invoice_id": "INV-3001"}, CONTROLLER)
    rejected(ap, "pay_invoice", {"invoice_id": "INV-3001"}, "already paid (by marcus@acme.example", ctx=CONTROLLER)
    rejected(ap, "reject_invoice", decide, "INV-3001 is paid")
    rejected(ap, "approve_invoice", {**decide, "invoice_id": "INV-2987"}, "INV-2987 is paid")

    ap.call("hold_invoice", {"invoice_id": "INV-3007", "reason": "AP-5: over $10,000 without a PO"}, CLERK)
    rejected(ap, "hold_invoice", {"invoice_id": "INV-3007", "reason": "again"}, "INV-3007 is already held")
    rejected(ap, "pay_invoice", {"invoice_id": "INV-3007"}, "INV-3007 is held", ctx=CONTROLLER)
    ap.call("reject_invoice", {"invoice_id": "INV-3006", "reason": "AP-4: 7.5% over PO-2006"}, CLERK)
    rejected(ap, "pay_invoice", {"invoice_id": "INV-3006"}, "INV-3006 is rejected", ctx=CONTROLLER)

    ap.call("approve_invoice", {"invoice_id": "INV-3004", "reason": "looks fine"}, CLERK)  # wrong, but allowed
    rejected(ap, "pay_invoice", {"invoice_id": "INV-3004"}, "VEN-004 (Apex Print & Signage) is blocked", ctx=CONTROLLER)


def test_working_the_queue_by_the_expected_decisions(ap):
    tools = {"approved": "approve_invoice", "rejected": "reject_invoice", "held": "hold_invoice"}
    for invoice_id, decision in EXPECTED.items():
        result = ap.call(tools[decision], {"invoice_id": invoice_id, "reason": f"policy: {decision}"}, CLERK)
        assert (result["status"], result["decided_by"]) == (decision, "rosa@acme.example")
    assert ap.call("list_invoices", {"status": "received"}, CLERK)["count"] == 0
    statuses = {i["id"]: i["status"] for i in ap.export()["invoices"] if i["id"] in EXPECTED}
    assert statuses == EXPECTED
    approved = ap.call("list_invoices", {"status": "approved"}, CLERK)["invoices"]
    for invoice in approved:
        assert ap.call("pay_invoice", {"invoice_id": invoice["id"]}, CONTROLLER)["status"] == "paid"
    assert sorted(i["id"] for i in ap.call("list_invoices", {"status": "paid"}, CLERK)["invoices"]) == [
        "INV-2987",
        "INV-2993",
        "INV-3001",
        "INV-3002",
        "INV-3008",
    ]
    assert [i["id"] for i in ap.call("list_invoices", {"status": "held"}, CLERK)["invoices"]] == [
        "INV-3003",
        "INV-3007",
    ]
