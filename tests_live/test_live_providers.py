"""Live tests of the cloud providers: they create (and remove) real, billed sandboxes.

Not collected by default (pytest's testpaths is `tests`). `pytest tests_live` runs them when the
credentials are there: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or ~/.modal.toml) for modal and modal_vm,
E2B_API_KEY for e2b, TENSORLAKE_API_KEY for tensorlake, TENKI_API_KEY for tenki (these two reach the provider
as the secret its `api_key` names by default), with the SDKs installed
(`pip install 'agentenv-framework[modal,e2b,tensorlake,tenki]'`). A provider that cannot be used is skipped,
and the reason names the missing variable or package.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from agent_env.config import Settings
from agent_env.providers import by_name
from agent_env.providers.base import ProviderUnavailable, SandboxSpec

KEY_VARIABLES = {"tensorlake": "TENSORLAKE_API_KEY", "tenki": "TENKI_API_KEY"}


@pytest.mark.parametrize("name", ["modal", "modal_vm", "e2b", "tensorlake", "tenki"])
async def test_create_exec_remove(name, tmp_path, monkeypatch):
    if name in KEY_VARIABLES:
        variable = KEY_VARIABLES[name]
        if not os.environ.get(variable):
            pytest.skip(f"{variable} is unset")
        monkeypatch.setenv(f"AGENT_ENV_SECRET_{name.upper()}_API_KEY", os.environ[variable])  # its default secret
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
        await sb.put_file("/tmp/agentenv-live/data.bin", b"\x00\xffbytes")  # a folder that did not exist
        assert await sb.get_file("/tmp/agentenv-live/data.bin") == b"\x00\xffbytes"
        with pytest.raises(FileNotFoundError):
            await sb.get_file("/tmp/agentenv-live/missing")
        assert [i.id for i in await provider.list(run_id)] == [sb.info.id]
    finally:
        assert await provider.remove(sb.info.id)
    for _ in range(30):  # the services take a moment to stop listing a removed sandbox
        if not await provider.list(run_id):
            break
        await asyncio.sleep(1)
    else:
        raise AssertionError(f"{name} still lists sandbox {sb.info.id} after removing it")
