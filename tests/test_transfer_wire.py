"""Our object-transfer bodies and snapshot/v1's card entry (agent_env/agents/transfer_wire.py) are the reference
protocol's on the wire. The reference's models live in its `agent` extra, which cannot install beside our pins, so
what they render was recorded once from it into tests/fixtures/ (regenerate with the reference framework's python:
`SNAPSHOT_V1.core_operations[...]` and `.optional_features["changelog"]` rendered as its registry's `to_card`, and each model's `model_fields`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from agent_env.agents import transfer_wire
from agent_env.agents.transfer_serving import AgentState, card_entries
from agent_env.agents.transfer_wire import card_request_accepts, required_fields

FIXTURES = Path(__file__).parent / "fixtures"


class _Keeps:
    async def save_state(self, context_id: str) -> AgentState:
        return AgentState(trajectory=b"[]")

    async def load_state(self, state: AgentState, context_id: str | None) -> str:
        return "c"


def test_our_snapshot_card_entry_is_the_reference_renders_byte_for_byte():
    expected = json.loads((FIXTURES / "snapshot_v1_card_entry.json").read_text())
    (entry,) = card_entries(_Keeps())
    ours = MessageToDict(entry)
    assert json.dumps(ours, sort_keys=True) == json.dumps(expected, sort_keys=True)  # (a Struct keeps keys sorted)


@pytest.mark.parametrize("name", sorted(json.loads((FIXTURES / "transfer_wire_fields.json").read_text())))
def test_each_body_model_has_the_reference_models_fields(name):
    expected = json.loads((FIXTURES / "transfer_wire_fields.json").read_text())[name]
    model = getattr(transfer_wire, name)
    fields = model.model_fields
    assert [k for k, f in fields.items() if f.is_required()] == expected["required"]
    assert [k for k, f in fields.items() if not f.is_required()] == expected["optional"]
    assert model.model_config.get("extra") == expected["extra"]


def test_a_card_request_contract_is_read_as_the_reference_reads_it():
    wanted = required_fields(transfer_wire.TaskObjectTrajectoryRequest)
    assert card_request_accepts({"required": ["task_id", "objects"]}, wanted)
    assert card_request_accepts({"oneOf": [{"required": ["task_id"]}, {"required": ["task_id", "objects"]}]}, wanted)
    assert card_request_accepts({"required": ["task_id"], "supported": ["objects"]}, wanted)
    assert not card_request_accepts({"required": ["task_id"]}, wanted)
    assert not card_request_accepts({"required": ["task_id", "objects", "after"]}, wanted)


def test_a_snapshot_object_that_is_not_opaque_is_refused_as_the_reference_refuses_it():
    grant = {"kind": "http-put", "url": "https://store.example/k", "expires_at": "2099-01-01T00:00:00Z"}
    with pytest.raises(ValidationError, match="media_type must be application/octet-stream"):
        transfer_wire.SnapshotWriteObjects.model_validate(
            {"trajectory": {"media_type": "application/json", "max_bytes": 1, "write": grant}}
        )
