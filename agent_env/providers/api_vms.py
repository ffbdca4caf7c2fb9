"""What the providers of cloud VMs reached with an API key (`tensorlake`, `tenki`) share: their settings, with the
key as a `secret:NAME` reference resolved only where it is used; their sandboxes' names; and a sandbox's command,
started in the background so that the call that starts it returns.
"""

from __future__ import annotations

import hashlib
import shlex

from agent_env.errors import BadInput
from agent_env.providers.base import ProviderConfig, ProviderUnavailable
from agent_env.stores.base import MissingSecret

COMMAND_LOG = "/tmp/agentenv-command.log"  # the sandbox's command's output (`Sandbox.logs`)
NOT_A_FILE = 66  # the exit code `read_script` gives for a path that is no file
# Unset in a VM. The tests' fakes of the SDKs set it to the folder that stands for a VM's filesystem, so these
# scripts' paths land there (the fakes run commands on the test machine).
ROOT_VAR = "_AGENTENV_ROOT"


def _at(path: str) -> str:
    """`path` in the VM, for a shell script."""
    return f'"${{{ROOT_VAR}:-}}"{shlex.quote(path)}'


def settings_of(provider: str, config: ProviderConfig, defaults: dict[str, str | None]) -> dict[str, str | None]:
    """The provider's settings (`[sandboxes.providers.NAME]`, or the framework's `[sandbox.providers.NAME.config]`)
    over their defaults: strings, an unknown key refused naming the known ones. `api_key` stays a reference here."""
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise BadInput(
            f"[sandboxes.providers.{provider}] has unknown key(s): {', '.join(unknown)}",
            f"use only {', '.join(sorted(defaults))}",
        )
    for key, value in config.items():
        if not (isinstance(value, str) and value.strip()):
            raise BadInput(
                f"[sandboxes.providers.{provider}] {key} must be a non-empty string, not {value!r}",
                f"set {key} to a string, or remove it",
            )
    return {**defaults, **{k: str(v).strip() for k, v in config.items()}}


def api_key(provider: str, config: ProviderConfig, default_secret: str) -> str:
    """The resolved API key: the config's `api_key` (a `secret:NAME` reference, or the value itself), by default
    the secret `default_secret`. A key that does not resolve makes the provider unusable here, naming the fix."""
    reference = config.get("api_key") or f"secret:{default_secret}"
    try:
        value = config.resolved("api_key", reference)
    except MissingSecret as e:
        raise ProviderUnavailable(
            f"no {provider} API key: {e.problem}",
            f"{e.fix}, or point [sandboxes.providers.{provider}] api_key at the secret that holds it",
        ) from None
    if not isinstance(value, str) or not value.strip():
        raise ProviderUnavailable(
            f"the {provider} API key is empty", f"set [sandboxes.providers.{provider}] api_key to a secret reference"
        )
    return value.strip()


def vm_name(prefix: str, install: str, name: str) -> str:
    """The VM's name at the cloud: this install's prefix (so listing finds only its own sandboxes, by a name the
    sandbox itself cannot change) and a hash of the sandbox's name (so a retried step finds its VM)."""
    return f"{install_prefix(prefix, install)}{hashlib.sha256(name.encode()).hexdigest()[:20]}"


def install_prefix(prefix: str, install: str) -> str:
    return f"{prefix}-{hashlib.sha256(install.encode()).hexdigest()[:10]}-"


def background(command: list[str]) -> list[str]:
    """`command` started in a session of its own, its output in COMMAND_LOG, detached from the call's streams."""
    return ["sh", "-c", f'setsid "$@" >{_at(COMMAND_LOG)} 2>&1 </dev/null &', "sh", *command]


def write_script(path: str) -> list[str]:
    """Writes its standard input to `path`, making the folders on the way."""
    return ["sh", "-c", f'mkdir -p "$(dirname {_at(path)})" && cat > {_at(path)}']


def read_script(path: str) -> list[str]:
    """Prints `path`, or exits NOT_A_FILE when it is no file."""
    return ["sh", "-c", f"test -f {_at(path)} || exit {NOT_A_FILE}; cat {_at(path)}"]


def tail_script(path: str, lines: int) -> list[str]:
    return ["sh", "-c", f"tail -n {int(lines)} {_at(path)}"]
