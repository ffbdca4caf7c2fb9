"""SDK exceptions as errors that say what happened and what to change. Both SDKs (openai, anthropic) raise the
same family of exceptions; the caller passes its SDK module. Never includes a key, only its `secret:` name."""

from __future__ import annotations

from types import ModuleType

from agent_env.agents.model_providers.reply import ModelError
from agent_env.config import ModelSettings


def explained(error: Exception, config: ModelSettings, sdk: ModuleType) -> ModelError:
    where = f"model endpoint {config.base_url} ({config.provider}, {config.model})"
    if isinstance(error, sdk.APITimeoutError):
        return ModelError(
            f"{where} did not answer within {config.timeout:g}s (tried {config.max_retries + 1} times); "
            "raise `timeout` under [models.PURPOSE] in .agentenv/config.toml if it is just slow"
        )
    if isinstance(error, sdk.APIConnectionError):
        return ModelError(f"{where} could not be reached (tried {config.max_retries + 1} times): {error}")
    if not isinstance(error, sdk.APIStatusError):
        return ModelError(f"{where} answered something unusable: {error}")
    status, said = error.status_code, _said(error)
    if status in (401, 403):
        if notice := config.withheld_notice():
            return ModelError(f"{where} refused the request ({status}: {said}): {notice}")
        if config.api_key:
            name = config.api_key.removeprefix("secret:")
            return ModelError(
                f"{where} refused the API key {config.api_key} ({status}: {said}); "
                f"check it, and set the right one with `agent-env secrets set {name}`"
            )
        return ModelError(
            f"{where} refused the request ({status}: {said}) and no API key is configured for it; "
            'store one with `agent-env secrets set NAME` and write api_key = "secret:NAME" under [models.PURPOSE]'
        )
    if status == 429:
        return ModelError(
            f"{where} is rate limiting (429: {said}) and still was after {config.max_retries} retries; "
            "run fewer agents at once or raise `max_retries` under [models.PURPOSE]"
        )
    return ModelError(f"{where} answered {status}: {said}")


def _said(error: Exception) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
    return str(error)[:300]
