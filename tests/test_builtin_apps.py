"""The built-in apps (mail, chat, helpdesk, billing) over the support-desk sample data."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_env.envs import App, Ctx, ToolError
from agent_env.envs.app_instance import AppInstance, load_app_class
from agent_env.envs.builtin import APPS
from agent_env.envs.builtin.billing import Billing
from agent_env.envs.builtin.chat import Chat
from agent_env.envs.builtin.helpdesk import Helpdesk
from agent_env.envs.builtin.mail import Mail

DATA = Path(__file__).parents[1] / "agent_env" / "bundles" / "support-desk" / "envs" / "support-desk" / "data.json"
SAMPLE = json.loads(DATA.read_text())
NOW = datetime(2026, 2, 16, 9, 0, tzinfo=UTC)
NOW_ISO = "2026-02-16T09:00:00Z"
CTX = Ctx(role="support", agent="sam@acme.example", virtual_now=NOW)


@pytest.fixture
def world(tmp_path):
    """world(AppClass) -> an instance loaded with the app's part of the sample data."""
    opened: list[AppInstance] = []

    def make(app_cls: type[App]) -> AppInstance:
        inst = AppInstance(app_cls, tmp_path / app_cls.name)
        inst.load(SAMPLE[app_cls.name])
        opened.append(inst)
        return inst

    yield make
    for inst in opened:
        inst.close()


def rejected(inst: AppInstance, tool: str, args: dict, *fragments: str) -> str:
    """The call raises a ToolError whose message holds every fragment, and changes nothing."""
    before = inst.export()
    with pytest.raises(ToolError) as e:
        inst.call(tool, args, CTX)
    message = str(e.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert inst.export() == before, f"a rejected {tool} changed the data"
    return message


def test_registry_and_sample_data_cover_the_four_apps(tmp_path):
    for name, cls in {"mail": Mail, "chat": Chat, "helpdesk": Helpdesk, "billing": Billing}.items():
        assert load_app_class(APPS[name]) is cls and cls.name == name
        inst = AppInstance(cls, tmp_path / name)
        inst.load(SAMPLE[name])
        exported = inst.export()
        assert {t: len(rows) for t, rows in exported.items()} == {t: len(rows) for t, rows in SAMPLE[name].items()}
        inst.reset()
        inst.load(SAMPLE[name])  # reset empties every table, so the sample loads again
        assert inst.export() == exported
        inst.close()
    assert "notes" in APPS


def test_literal_arguments_list_their_values_and_read_only_flags():
    assert Mail.tools["list_messages"].input_schema["properties"]["folder"]["enum"] == ["inbox", "sent"]
    assert Helpdesk.tools["create_ticket"].input_schema["properties"]["priority"]["enum"] == [
        "low",
        "normal",
        "high",
        "urgent",
    ]
    assert Helpdesk.tools["set_status"].input_schema["properties"]["status"]["enum"] == [
        "open",
        "pending",
        "solved",
        "closed",
    ]
    status_filter = Helpdesk.tools["list_tickets"].input_schema["properties"]["status"]["anyOf"]
    assert status_filter[0]["enum"] == ["open", "pending", "solved", "closed"]
    read_only = {
        f"{cls.name}.{n}" for cls in (Mail, Chat, Helpdesk, Billing) for n, s in cls.tools.items() if s.read_only
    }
    assert read_only == {
        "mail.list_mailboxes",
        "mail.list_messages",
        "mail.search_messages",
        "mail.get_thread",
        "chat.list_channels",
        "chat.read_channel",
        "chat.read_direct_messages",
        "helpdesk.list_tickets",
        "helpdesk.get_ticket",
        "billing.get_account",
        "billing.list_orders",
        "billing.get_order",
    }
    hidden = {f"{cls.name}.{n}" for cls in (Mail, Chat, Helpdesk, Billing) for n, s in cls.tools.items() if s.hidden}
    assert hidden == {"billing.issue_refund"}


# -- Dana's story ------------------------------------------------------------------------------------------


def test_dana_was_charged_twice_for_one_order(world):
    billing, helpdesk, mail, chat = world(Billing), world(Helpdesk), world(Mail), world(Chat)
    account = billing.call("get_account", {"email": "dana@example.com"}, CTX)
    assert account["id"] == "ACC-001" and "ORD-1001" in account["order_ids"]
    order = billing.call("get_order", {"order_id": "ORD-1001"}, CTX)
    assert order["total_cents"] == 4900 and len(order["items"]) == 1 and not order["verified"]
    assert [(c["id"], c["amount_cents"], c["status"], c["refundable_cents"]) for c in order["charges"]] == [
        ("CH-5001", 4900, "succeeded", 4900),
        ("CH-5002", 4900, "succeeded", 4900),
    ]
    assert {c["created_at"][:10] for c in order["charges"]} == {"2026-02-09"}
    assert order["refunds"] == [] and order["charged_cents"] == 2 * order["total_cents"]
    assert Billing.tools["issue_refund"].hidden

    ticket = helpdesk.call("list_tickets", {"customer_email": "dana@example.com"}, CTX)["tickets"]
    assert [(t["id"], t["status"], t["assignee"]) for t in ticket] == [("TCK-1004", "open", None)]
    emails = mail.call("search_messages", {"query": "charged twice", "mailbox": "support@acme.example"}, CTX)
    assert [(m["id"], m["from"], m["to"], m["read"]) for m in emails["messages"]] == [
        ("MSG-0007", "dana@example.com", ["support@acme.example"], False)
    ]
    support = chat.call("read_channel", {"channel": "#support"}, CTX)
    assert "backlog" in support["messages"][-1]["text"].lower()


# -- mail ---------------------------------------------------------------------------------------------------


def test_mail_lists_reads_and_searches(world):
    mail = world(Mail)
    boxes = {b["address"]: b for b in mail.call("list_mailboxes", {}, CTX)["mailboxes"]}
    assert boxes["support@acme.example"]["display_name"] == "Acme Support"
    assert boxes["support@acme.example"]["unread"] == 1
    inbox = mail.call("list_messages", {"mailbox": "support@acme.example"}, CTX)
    assert [m["id"] for m in inbox["messages"]] == ["MSG-0007", "MSG-0004", "MSG-0003", "MSG-0001"]
    assert "body" not in inbox["messages"][0] and inbox["messages"][0]["preview"].startswith("Hi Acme")
    unread = mail.call("list_messages", {"mailbox": "support@acme.example", "unread_only": True}, CTX)
    assert [m["id"] for m in unread["messages"]] == ["MSG-0007"]
    sent = mail.call("list_messages", {"mailbox": "support@acme.example", "folder": "sent", "limit": 1}, CTX)
    assert [m["id"] for m in sent["messages"]] == ["MSG-0005"]

    message = mail.call("read_message", {"message_id": "MSG-0007"}, CTX)
    assert message["body"].startswith("Hi Acme") and message["read"] is True
    assert mail.call("list_messages", {"mailbox": "support@acme.example", "unread_only": True}, CTX)["count"] == 0
    assert next(m for m in mail.export()["messages"] if m["id"] == "MSG-0007")["is_read"] == 1

    assert [m["id"] for m in mail.call("search_messages", {"query": "ORD-1002"}, CTX)["messages"]] == [
        "MSG-0005",
        "MSG-0004",
    ]
    assert mail.call("search_messages", {"query": "OMAR@EXAMPLE"}, CTX)["count"] == 1  # sender, any case
    assert mail.call("search_messages", {"query": "ORD-1002", "mailbox": "carlos@example.com"}, CTX)["count"] == 0
    thread = mail.call("get_thread", {"thread_id": "THR-0003"}, CTX)
    assert [m["id"] for m in thread["messages"]] == ["MSG-0004", "MSG-0005"]
    assert thread["messages"][1]["cc"] == ["sam@acme.example"]


def test_mail_send_and_reply(world):
    mail = world(Mail)
    new = mail.call(
        "send_email",
        {
            "sender": "sam@acme.example",
            "to": ["ops@partner.example"],
            "subject": "Carrier delays",
            "body": "Any news on the hub?",
        },
        CTX,
    )
    assert (new["id"], new["thread_id"], new["sent_at"], new["read"]) == ("MSG-0008", "THR-0006", NOW_ISO, False)
    reply = mail.call(
        "send_email",
        {
            "sender": "support@acme.example",
            "to": ["dana@example.com"],
            "cc": ["lee@acme.example", "dana@example.com"],
            "in_reply_to": "MSG-0007",
            "body": "Sorry, Dana: we are looking into the double charge.",
        },
        CTX,
    )
    assert reply["id"] == "MSG-0009" and reply["thread_id"] == "THR-0005"
    assert reply["subject"] == "Re: Charged twice for order ORD-1001" and reply["in_reply_to"] == "MSG-0007"
    assert reply["to"] == ["dana@example.com"] and reply["cc"] == ["lee@acme.example"]  # no duplicate copy
    again = mail.call(
        "send_email",
        {"sender": "dana@example.com", "to": ["support@acme.example"], "in_reply_to": "MSG-0009", "body": "Thanks!"},
        CTX,
    )
    assert again["subject"] == "Re: Charged twice for order ORD-1001", "no Re: Re:"
    assert [m["id"] for m in mail.call("get_thread", {"thread_id": "THR-0005"}, CTX)["messages"]] == [
        "MSG-0007",
        "MSG-0009",
        "MSG-0010",
    ]
    assert mail.call("list_messages", {"mailbox": "lee@acme.example"}, CTX)["messages"][0]["id"] == "MSG-0009"

    exported = mail.export()
    assert {m["id"]: m["sent_at"] for m in exported["messages"]}["MSG-0009"] == NOW_ISO
    assert [r for r in exported["recipients"] if r["message_id"] == "MSG-0009"] == [
        {"message_id": "MSG-0009", "address": "dana@example.com", "kind": "to"},
        {"message_id": "MSG-0009", "address": "lee@acme.example", "kind": "cc"},
    ]


def test_mail_errors(world):
    mail = world(Mail)
    send = {"sender": "support@acme.example", "to": ["dana@example.com"], "subject": "Hi", "body": "Hello"}
    rejected(
        mail,
        "send_email",
        {**send, "sender": "nobody@acme.example"},
        "no mailbox 'nobody@acme.example'",
        "list_mailboxes",
    )
    rejected(mail, "send_email", {**send, "to": ["dana(at)example.com"]}, "not a valid email address")
    rejected(mail, "send_email", {**send, "to": []}, "at least one recipient")
    rejected(mail, "send_email", {**send, "subject": None}, "subject is required")
    rejected(mail, "send_email", {**send, "body": "  "}, "body is empty")
    rejected(mail, "send_email", {**send, "in_reply_to": "MSG-0999"}, "no message 'MSG-0999'", "list_messages")
    rejected(mail, "list_messages", {"mailbox": "dana@example"}, "no mailbox")
    rejected(mail, "list_messages", {"mailbox": "support@acme.example", "folder": "drafts"}, "folder")
    rejected(mail, "list_messages", {"mailbox": "support@acme.example", "limit": 0}, "limit")
    rejected(mail, "read_message", {"message_id": "MSG-9"}, "no message 'MSG-9'")
    rejected(mail, "search_messages", {"query": " "}, "query is empty")
    rejected(mail, "get_thread", {"thread_id": "THR-9"}, "no thread 'THR-9'")


# -- chat ---------------------------------------------------------------------------------------------------


def test_chat_channels_and_messages(world):
    chat = world(Chat)
    channels = {c["name"]: c for c in chat.call("list_channels", {}, CTX)["channels"]}
    assert channels["support"]["members"] == ["lee", "priya", "sam"] and channels["support"]["messages"] == 3
    posted = chat.call("post_message", {"channel": "support", "author": "sam", "text": "I'll take TCK-1004."}, CTX)
    assert posted == {
        "id": "CM-0005",
        "channel": "support",
        "author": "sam",
        "text": "I'll take TCK-1004.",
        "posted_at": NOW_ISO,
    }
    latest = chat.call("read_channel", {"channel": "support", "limit": 2}, CTX)["messages"]
    assert [m["id"] for m in latest] == ["CM-0004", "CM-0005"]

    created = chat.call("create_channel", {"name": "#refunds", "members": ["sam", "lee", "sam"]}, CTX)
    assert created == {"name": "refunds", "members": ["lee", "sam"], "created_at": NOW_ISO}
    chat.call("post_message", {"channel": "refunds", "author": "lee", "text": "hello"}, CTX)
    assert chat.call("read_channel", {"channel": "refunds"}, CTX)["messages"][0]["id"] == "CM-0006"

    dm = chat.call("send_direct_message", {"sender": "sam", "recipient": "priya", "text": "On it."}, CTX)
    assert dm == {"id": "DM-0003", "sender": "sam", "recipient": "priya", "text": "On it.", "sent_at": NOW_ISO}
    convo = chat.call("read_direct_messages", {"user": "sam", "other": "lee"}, CTX)
    assert [(m["sender"], m["text"]) for m in convo["messages"]] == [
        ("lee", "Can you cover the queue Monday morning? I'm in late."),
        ("sam", "Sure, I've got it."),
    ]
    assert chat.call("read_direct_messages", {"user": "priya", "other": "sam"}, CTX)["count"] == 1

    exported = chat.export()
    assert {"channel": "refunds", "handle": "lee"} in exported["channel_members"]
    assert exported["channels"][-1] == {"name": "refunds", "created_at": NOW_ISO}
    assert exported["direct_messages"][-1]["sent_at"] == NOW_ISO


def test_chat_errors(world):
    chat = world(Chat)
    rejected(
        chat,
        "post_message",
        {"channel": "billing-ops", "author": "sam", "text": "hi"},
        "'sam' is not a member of #billing-ops",
        "lee, priya",
    )
    rejected(
        chat,
        "post_message",
        {"channel": "general", "author": "sam", "text": "hi"},
        "no channel #general",
        "list_channels",
    )
    rejected(
        chat, "post_message", {"channel": "support", "author": "bob", "text": "hi"}, "no user 'bob'", "lee, priya, sam"
    )
    rejected(chat, "post_message", {"channel": "support", "author": "sam", "text": ""}, "text is empty")
    rejected(chat, "create_channel", {"name": "support", "members": ["sam"]}, "#support already exists")
    rejected(chat, "create_channel", {"name": "Big Channel", "members": ["sam"]}, "invalid channel name")
    rejected(chat, "create_channel", {"name": "new", "members": []}, "at least one member")
    rejected(chat, "create_channel", {"name": "new", "members": ["sam", "zed"]}, "no user 'zed'")
    rejected(chat, "read_channel", {"channel": "nope"}, "no channel #nope")
    rejected(chat, "send_direct_message", {"sender": "sam", "recipient": "sam", "text": "hi"}, "same user")
    rejected(chat, "send_direct_message", {"sender": "sam", "recipient": "dana", "text": "hi"}, "no user 'dana'")
    rejected(chat, "read_direct_messages", {"user": "sam", "other": "x"}, "no user 'x'")


# -- helpdesk -----------------------------------------------------------------------------------------------


def test_helpdesk_lists_and_reads_tickets(world):
    helpdesk = world(Helpdesk)
    everything = helpdesk.call("list_tickets", {}, CTX)
    assert [t["id"] for t in everything["tickets"]] == ["TCK-1001", "TCK-1002", "TCK-1003", "TCK-1005", "TCK-1004"]
    assert [t["id"] for t in helpdesk.call("list_tickets", {"status": "open"}, CTX)["tickets"]] == [
        "TCK-1005",
        "TCK-1004",
    ]
    assert [t["id"] for t in helpdesk.call("list_tickets", {"assignee": "unassigned"}, CTX)["tickets"]] == ["TCK-1004"]
    assert [
        t["id"]
        for t in helpdesk.call("list_tickets", {"assignee": "sam@acme.example", "status": "pending"}, CTX)["tickets"]
    ] == ["TCK-1003"]
    ticket = helpdesk.call("get_ticket", {"ticket_id": "TCK-1002"}, CTX)
    assert ticket["customer_name"] == "Mei Tanaka" and ticket["description"].startswith("One lid")
    assert [(c["id"], c["internal"]) for c in ticket["comments"]] == [("CMT-0002", True), ("CMT-0003", False)]


def test_helpdesk_ticket_lifecycle(world):
    helpdesk = world(Helpdesk)
    ticket = helpdesk.call(
        "create_ticket",
        {"customer_email": "new@example.org", "subject": "Gift wrap?", "description": "Do you gift wrap?"},
        CTX,
    )
    assert (ticket["id"], ticket["status"], ticket["priority"], ticket["assignee"]) == (
        "TCK-1006",
        "open",
        "normal",
        None,
    )
    assert ticket["created_at"] == ticket["updated_at"] == NOW_ISO
    assert {"email": "new@example.org", "name": None} in helpdesk.export()["customers"]

    assigned = helpdesk.call("assign_ticket", {"ticket_id": "TCK-1004", "assignee": "sam@acme.example"}, CTX)
    assert assigned["assignee"] == "sam@acme.example" and assigned["updated_at"] == NOW_ISO
    note = helpdesk.call(
        "add_comment",
        {
            "ticket_id": "TCK-1004",
            "author": "sam@acme.example",
            "body": "Duplicate charge CH-5002 confirmed.",
            "internal": True,
        },
        CTX,
    )
    assert note == {
        "id": "CMT-0007",
        "ticket_id": "TCK-1004",
        "author": "sam@acme.example",
        "body": "Duplicate charge CH-5002 confirmed.",
        "internal": True,
        "created_at": NOW_ISO,
    }
    reply = helpdesk.call(
        "add_comment", {"ticket_id": "TCK-1004", "author": "dana@example.com", "body": "Thanks for looking."}, CTX
    )
    assert reply["internal"] is False
    for status in ("pending", "solved", "open", "solved", "closed"):  # anything goes until closed
        changed = helpdesk.call("set_status", {"ticket_id": "TCK-1004", "status": status}, CTX)
        assert changed["status"] == status
    assert changed["previous_status"] == "solved"

    exported = {t["id"]: t for t in helpdesk.export()["tickets"]}["TCK-1004"]
    assert (exported["status"], exported["assignee"], exported["updated_at"]) == ("closed", "sam@acme.example", NOW_ISO)
    assert [c["internal"] for c in helpdesk.export()["comments"] if c["ticket_id"] == "TCK-1004"] == [1, 0]


def test_helpdesk_errors(world):
    helpdesk = world(Helpdesk)
    rejected(helpdesk, "get_ticket", {"ticket_id": "TCK-9999"}, "no ticket 'TCK-9999'", "list_tickets")
    rejected(
        helpdesk, "list_tickets", {"assignee": "bob@acme.example"}, "no agent 'bob@acme.example'", "sam@acme.example"
    )
    rejected(helpdesk, "list_tickets", {"customer_email": "who@example.com"}, "no customer with email")
    rejected(helpdesk, "list_tickets", {"status": "new"}, "status")
    rejected(
        helpdesk,
        "create_ticket",
        {"customer_email": "dana", "subject": "s", "description": "d"},
        "not a valid email address",
    )
    rejected(
        helpdesk,
        "create_ticket",
        {"customer_email": "dana@example.com", "subject": "s", "description": "d", "priority": "critical"},
        "priority",
    )
    rejected(
        helpdesk,
        "create_ticket",
        {"customer_email": "dana@example.com", "subject": " ", "description": "d"},
        "must not be empty",
    )
    rejected(helpdesk, "assign_ticket", {"ticket_id": "TCK-1004", "assignee": "dana@example.com"}, "no agent")
    rejected(
        helpdesk,
        "assign_ticket",
        {"ticket_id": "TCK-1003", "assignee": "sam@acme.example"},
        "already assigned to sam@acme.example",
    )
    rejected(helpdesk, "set_status", {"ticket_id": "TCK-1004", "status": "open"}, "TCK-1004 is already open")
    rejected(
        helpdesk, "set_status", {"ticket_id": "TCK-1001", "status": "open"}, "TCK-1001 is closed", "create a new ticket"
    )
    rejected(helpdesk, "set_status", {"ticket_id": "TCK-1001", "status": "closed"}, "already closed")
    rejected(helpdesk, "assign_ticket", {"ticket_id": "TCK-1001", "assignee": "sam@acme.example"}, "closed")
    rejected(
        helpdesk, "add_comment", {"ticket_id": "TCK-1001", "author": "lee@acme.example", "body": "x"}, "create_ticket"
    )
    rejected(
        helpdesk,
        "add_comment",
        {"ticket_id": "TCK-1004", "author": "omar@example.net", "body": "x"},
        "dana@example.com",
    )
    rejected(
        helpdesk,
        "add_comment",
        {"ticket_id": "TCK-1004", "author": "dana@example.com", "body": "x", "internal": True},
        "only agents",
    )
    rejected(
        helpdesk, "add_comment", {"ticket_id": "TCK-1004", "author": "sam@acme.example", "body": ""}, "body is empty"
    )


# -- billing ------------------------------------------------------------------------------------------------


def test_billing_accounts_and_orders(world):
    billing = world(Billing)
    account = billing.call("get_account", {"email": "Dana@Example.com"}, CTX)
    assert account == {
        "id": "ACC-001",
        "email": "dana@example.com",
        "name": "Dana Whitfield",
        "created_at": "2026-01-08T12:00:00Z",
        "order_ids": ["ORD-1001", "ORD-1005"],
    }
    orders = billing.call("list_orders", {"account_id": "ACC-001"}, CTX)
    assert [(o["id"], o["total_cents"], o["verified"]) for o in orders["orders"]] == [
        ("ORD-1001", 4900, False),
        ("ORD-1005", 2200, False),
    ]
    mei = billing.call("get_order", {"order_id": "ORD-1003"}, CTX)
    assert [(c["id"], c["refundable_cents"]) for c in mei["charges"]] == [("CH-5004", 0), ("CH-5005", 2000)]
    assert mei["refunded_cents"] == 500 and mei["verified"] is True


def test_billing_verify_and_refund(world):
    billing = world(Billing)
    verified = billing.call("verify_order", {"order_id": "ORD-1001", "verified_by": "sam@acme.example"}, CTX)
    assert (verified["verified"], verified["verified_by"], verified["verified_at"]) == (
        True,
        "sam@acme.example",
        NOW_ISO,
    )
    refund = billing.call(
        "issue_refund",
        {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": "duplicate charge"},
        CTX,
    )
    assert refund == {
        "id": "RF-0002",
        "order_id": "ORD-1001",
        "charge_id": "CH-5002",
        "amount_cents": 4900,
        "reason": "duplicate charge",
        "issued_by": "sam@acme.example",
        "created_at": NOW_ISO,
        "charge_refundable_cents": 0,
    }
    order = billing.call("get_order", {"order_id": "ORD-1001"}, CTX)
    assert [c["refundable_cents"] for c in order["charges"]] == [4900, 0] and order["refunded_cents"] == 4900
    partial = billing.call(
        "issue_refund",
        {"order_id": "ORD-1003", "charge_id": "CH-5005", "amount_cents": 1500, "reason": "price match"},
        CTX,
    )
    assert partial["id"] == "RF-0003" and partial["charge_refundable_cents"] == 500

    exported = billing.export()
    assert {o["id"]: o["verified"] for o in exported["orders"]}["ORD-1001"] == 1
    assert [(r["id"], r["created_at"]) for r in exported["refunds"]] == [
        ("RF-0001", "2026-02-13T10:20:00Z"),
        ("RF-0002", NOW_ISO),
        ("RF-0003", NOW_ISO),
    ]


def test_billing_errors(world):
    billing = world(Billing)
    rejected(billing, "get_account", {"email": "nobody@example.com"}, "no account with email")
    rejected(billing, "list_orders", {"account_id": "ACC-999"}, "no account 'ACC-999'", "get_account")
    rejected(billing, "get_order", {"order_id": "ORD-9"}, "no order 'ORD-9'", "list_orders")
    rejected(
        billing,
        "verify_order",
        {"order_id": "ORD-1003", "verified_by": "sam@acme.example"},
        "already verified",
        "lee@acme.example",
    )
    billing.call("verify_order", {"order_id": "ORD-1001", "verified_by": "sam@acme.example"}, CTX)
    rejected(
        billing,
        "verify_order",
        {"order_id": "ORD-1001", "verified_by": "lee@acme.example"},
        "ORD-1001 is already verified (by sam@acme.example",
    )
    refund = {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": "duplicate"}
    rejected(
        billing, "issue_refund", {**refund, "charge_id": "CH-5003"}, "belongs to order ORD-1002", "CH-5001, CH-5002"
    )
    rejected(billing, "issue_refund", {**refund, "charge_id": "CH-0000"}, "no such charge")
    rejected(billing, "issue_refund", {**refund, "order_id": "ORD-0000"}, "no order 'ORD-0000'")
    rejected(billing, "issue_refund", {**refund, "amount_cents": 0}, "must be positive")
    rejected(billing, "issue_refund", {**refund, "amount_cents": 4901}, "4900 cents still refundable on CH-5002")
    rejected(billing, "issue_refund", {**refund, "reason": ""}, "reason is empty")
    rejected(billing, "issue_refund", {**refund, "order_id": "ORD-1003", "charge_id": "CH-5004"}, "status failed")
    rejected(
        billing,
        "issue_refund",
        {**refund, "order_id": "ORD-1003", "charge_id": "CH-5005", "amount_cents": 2001},
        "2000 cents still refundable",
        "already refunded 500",
    )
    billing.call("issue_refund", refund, CTX)
    rejected(billing, "issue_refund", {**refund, "amount_cents": 1}, "already fully refunded")


def test_ids_follow_the_loaded_data_not_a_counter(tmp_path):
    """Ids come from table contents: an empty instance starts at the first id, a loaded one continues."""
    empty = AppInstance(Helpdesk, tmp_path / "h")
    args = {"customer_email": "a@example.com", "subject": "s", "description": "d"}
    assert empty.call("create_ticket", args, CTX)["id"] == "TCK-1001"
    empty.reset()
    empty.load({"tickets": [{**SAMPLE["helpdesk"]["tickets"][0], "id": "TCK-1041"}]})
    assert empty.call("create_ticket", args, CTX)["id"] == "TCK-1042"
    empty.close()
    mail = AppInstance(Mail, tmp_path / "m")
    mail.load({"mailboxes": [{"address": "a@acme.example", "display_name": "A"}]})
    sent = mail.call(
        "send_email", {"sender": "a@acme.example", "to": ["b@example.com"], "subject": "s", "body": "b"}, CTX
    )
    assert (sent["id"], sent["thread_id"]) == ("MSG-0001", "THR-0001")
    mail.close()
