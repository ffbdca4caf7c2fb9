"""Live tests of the modal and e2b providers: they create (and remove) real, billed sandboxes.

Not collected by default (pytest's testpaths is `tests`). `pytest tests_live` runs them when the
credentials are there: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or ~/.modal.toml) for modal, E2B_API_KEY
for e2b, with the SDKs installed (`pip install 'agentenv-framework[modal,e2b]'`). A provider that cannot be used is
skipped, and the reason names the missing variable or package.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agent_env.config import Settings
from agent_env.providers import by_name
from agent_env.providers.base import ProviderUnavailable, SandboxSpec


@pytest.mark.parametrize("name", ["modal", "e2b"])
async def test_create_exec_remove(name, tmp_path):
    provider = by_name.load(name, Settings(state_dir=tmp_path))
    try:
        await provider.check()
    except ProviderUnavailable as e:
        pytest.skip(str(e))  # names what to set or install
    run_id = f"live-{uuid.uuid4().hex[:8]}"
    sb = await provider.create(SandboxSpec(name=f"agentenv-{run_id}", run_id=run_id, ttl=600))
    try:
        result = await sb.exec(["echo", "hi"])
        assert (result.exit_code, result.stdout) == (0, "hi\n")
        assert [i.id for i in await provider.list(run_id)] == [sb.info.id]
    finally:
        assert await provider.remove(sb.info.id)
    for _ in range(30):  # the services take a moment to stop listing a removed sandbox
        if not await provider.list(run_id):
            break
        await asyncio.sleep(1)
    else:
        raise AssertionError(f"{name} still lists sandbox {sb.info.id} after removing it")
