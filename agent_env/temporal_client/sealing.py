"""Planners' side of seals (agent_env/temporal_client/seals.py says what a seal is): every client `connect` makes seals
each workflow start and update it sends. Workers check them (agent_env/temporal/sealed_worker.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    StartWorkflowUpdateWithStartInput,
    WorkflowHandle,
    WorkflowUpdateHandle,
)

from agent_env.temporal_client import seals
from agent_env.temporal_client.seals import START, UPDATE, PlanKey


class SealingClient(Interceptor):
    """Seals every workflow start and update this client sends. The key is read when first needed, so a client
    that only reads (runs list, queries) never touches it."""

    def __init__(self, namespace: str, key: Callable[[], PlanKey]) -> None:
        self.namespace = namespace
        self._load = key
        self._key: PlanKey | None = None

    def key(self) -> PlanKey:
        if self._key is None:
            self._key = self._load()
        return self._key

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _SealingOutbound(next, self)


class _SealingOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, sealing: SealingClient) -> None:
        super().__init__(next)
        self.sealing = sealing

    def _seal(self, what: str, workflow_id: str, name: str, args: Any, extra: str = "") -> Any:
        subject = seals.Subject(what, self.sealing.namespace, workflow_id, name, extra)
        return seals.make(self.sealing.key(), subject, args, datetime.now(UTC))

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        input.headers = {**input.headers, seals.HEADER: self._seal(START, input.id, input.workflow, input.args)}
        return await super().start_workflow(input)

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle[Any]:
        input.update_id = input.update_id or str(uuid.uuid4())  # the seal names it: a copy under another id fails
        seal = self._seal(UPDATE, input.id, input.update, input.args, input.update_id)
        input.headers = {**input.headers, seals.HEADER: seal}
        return await super().start_workflow_update(input)

    async def start_update_with_start_workflow(
        self, input: StartWorkflowUpdateWithStartInput
    ) -> WorkflowUpdateHandle[Any]:
        start, update = input.start_workflow_input, input.update_workflow_input
        update.update_id = update.update_id or str(uuid.uuid4())
        start.headers = {**start.headers, seals.HEADER: self._seal(START, start.id, start.workflow, start.args)}
        seal = self._seal(UPDATE, start.id, update.update, update.args, update.update_id)
        update.headers = {**update.headers, seals.HEADER: seal}
        return await super().start_update_with_start_workflow(input)
