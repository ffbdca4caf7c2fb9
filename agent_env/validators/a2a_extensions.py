"""Validators of an A2A agent's configuring extensions: `peer-agents/v1` (set, then list shows it),
`skill-config/v1` (add a skill, then list shows it) and `install/v1` (its declaration is one an installer can
run). Each applies only when the agent's card declares its extension; otherwise its report holds one optional
finding, `<name>.declared`. The wire shapes are the protocol's (agentenv_protocol/a2a_agent/extensions.py).

Every extension validator (these and `a2a_extension_tasks`') opens the same way (`open_extension`: the card, the
declaration, its params, then `same_origin`), calls the agent through `a2a_wire.ExtensionProbe`, and reports an
answer with `answered`.
"""

from __future__ import annotations

import string
import uuid
from typing import Any

from agent_env.agents.client import AgentClient, AgentReplyInvalid, AgentUnreachable
from agent_env.agents.extensions import SKILL_CONFIG, declared
from agent_env.gateway_client.wire import JsonObject
from agent_env.validators.a2a_object_checks import Rooms, bundle_skill, outside_a_run
from agent_env.validators.a2a_wire import (
    INSTALL,
    PEER_AGENTS,
    STANDARD_ENDPOINTS,
    ExtensionProbe,
    OffOrigin,
    ProbeAnswer,
)
from agent_env.validators.report import Finding, ValidationReport

# -- what every extension validator checks first: the card, the declaration, its params --


def not_declared(prefix: str, uri: str) -> Finding:
    """The one finding of a validator whose extension the card does not declare: optional, nothing to fix
    unless the agent means to serve it."""
    return Finding.failed(
        f"{prefix}.declared",
        f"not declared: the card's capabilities.extensions lists no {uri}, so it was not checked",
        f"if the agent serves {uri}, declare it in capabilities.extensions (its uri, and the params the protocol "
        "defines for it); otherwise there is nothing to fix",
        required=False,
    )


async def open_extension(
    agent: AgentClient, validator: str, uri: str, prefix: str
) -> tuple[ValidationReport, ExtensionProbe | None]:
    """A report begun for `validator`, and the agent's `uri` extension to probe (None when there is nothing
    to probe: no card, or the extension is not declared; the report says which)."""
    report = ValidationReport(validator=validator, target=agent.url)
    try:
        card = await agent.card()
    except (AgentUnreachable, AgentReplyInvalid) as e:
        report.checks.append(
            Finding.failed(
                f"{prefix}.card",
                f"no usable agent card: {e}",
                "serve the A2A agent card at URL/.well-known/agent-card.json, naming the URL it is reached at",
            )
        )
        return report, None
    params = declared(card).get(uri)
    if params is None:
        report.checks.append(not_declared(prefix, uri))
        return report, None
    report.checks.append(Finding.ok(f"{prefix}.declared"))
    problem = _malformed(params)
    if problem:
        report.checks.append(
            Finding.failed(
                f"{prefix}.params",
                f"the card's {uri} params: {problem}",
                'declare params as the protocol does: {"endpoint": "/ext/...", "methods": {"<operation>": '
                '{"method": "POST", ...}}}',
            )
        )
        return report, None
    return report, ExtensionProbe(agent, uri, params)


def _malformed(params: Any) -> str:
    """What makes a declaration's params unreadable as the protocol's (empty when they read)."""
    if not isinstance(params, dict):
        return f"not an object ({type(params).__name__})"
    methods = params.get("methods", {})
    if not isinstance(methods, dict) or not all(isinstance(m, dict) for m in methods.values()):
        return "methods is not an object of operations, each an object"
    for where, value in [("endpoint", params.get("endpoint"))] + [
        (f"methods.{name}.{key}", spec.get(key)) for name, spec in methods.items() for key in ("endpoint", "method")
    ]:
        if value is not None and not isinstance(value, str):
            return f"{where} is {str(value)[:80]}, not a string"
    return ""


def answered(name: str, answer: ProbeAnswer, fix: str, *, required: bool = True) -> Finding:
    """A check that the operation answered 2xx."""
    if answer.ok:
        return Finding.ok(name, required=required)
    return Finding.failed(name, answer.said(), fix, required=required)


def same_origin(probe: ExtensionProbe, prefix: str, operations: dict[str, str]) -> Finding:
    """The card's operations (name -> default method) all resolve on the agent's origin."""
    for name, method in operations.items():
        try:
            probe.where(name, method)
        except OffOrigin as e:
            return Finding.failed(
                f"{prefix}.origin",
                str(e),
                "declare the extension's endpoint as a path on the agent's own origin (e.g. "
                f"{STANDARD_ENDPOINTS.get(probe.uri, '/ext/...')})",
            )
    return Finding.ok(f"{prefix}.origin")


# -- peer-agents/v1 --

PROBE_PEER_URL = "http://validator-probe-peer.invalid/"  # .invalid never resolves (RFC 2606): nothing is reached


async def verify_peer_agents(agent: AgentClient) -> ValidationReport:
    """`peer-agents/v1`: a set of one probe peer is answered 2xx, and list then shows that peer. What the agent
    listed before is set back afterwards (as listed: name, url, description)."""
    report, probe = await open_extension(agent, "verify_a2a_peer_agents", PEER_AGENTS, "peer_agents")
    if probe is None:
        return report
    report.checks.append(same_origin(probe, "peer_agents", {"set": "POST", "list": "GET"}))
    if not report.passed:
        return report
    before = await probe.call("list", "GET")
    name = f"agent-env-validator-{uuid.uuid4().hex[:8]}"
    peer = {"name": name, "url": PROBE_PEER_URL, "description": "agent-env validator probe (never reached)"}
    set_answer = await probe.call("set", "POST", {"peers": [peer]})
    report.checks.append(
        answered(
            "peer_agents.set",
            set_answer,
            'serve the set operation: POST {"peers": [{"name", "url", "card"?, "description"?}]} replaces the '
            "agent's peers and answers 2xx",
        )
    )
    listed = await probe.call("list", "GET")
    peers = _listed_peers(listed.json_object)
    if peers is None:
        report.checks.append(
            Finding.failed(
                "peer_agents.list",
                listed.said() + ' (wanted 2xx with {"peers": [...]})',
                'serve the list operation: GET answers {"peers": [{"name", "url", "description"?}, ...]}',
            )
        )
    else:
        report.checks.append(Finding.ok("peer_agents.list"))
        shown = next((p for p in peers if p.get("name") == name), None)
        report.checks.append(
            Finding.ok("peer_agents.round_trip")
            if shown is not None and shown.get("url") == PROBE_PEER_URL
            else Finding.failed(
                "peer_agents.round_trip",
                f"after set {{peers: [{name!r} at {PROBE_PEER_URL}]}}, list answered "
                f"{[p.get('name') for p in peers][:10]}"
                + ("" if shown is None else f" with its url {shown.get('url')!r}"),
                "list what the last set gave: each peer's name and url as sent",
            )
        )
    report.checks.append(await _restore_peers(probe, _listed_peers(before.json_object) or []))
    return report


def _listed_peers(body: JsonObject | None) -> list[JsonObject] | None:
    peers = (body or {}).get("peers")
    if not isinstance(peers, list) or not all(isinstance(p, dict) for p in peers):
        return None
    return peers


async def _restore_peers(probe: ExtensionProbe, before: list[JsonObject]) -> Finding:
    kept = [
        {k: p[k] for k in ("name", "url", "description") if isinstance(p.get(k), str)}
        for p in before
        if isinstance(p.get("name"), str) and isinstance(p.get("url"), str)
    ]
    return answered(
        "peer_agents.restored",
        await probe.call("set", "POST", {"peers": kept}),
        "let set replace the probe peer with the peers listed before",
        required=False,
    )


# -- skill-config/v1 --

SKILL_MD = "---\nname: {name}\ndescription: {description}\n---\nA skill the agent-env validator added; ignore it.\n"


async def verify_skill_config(
    agent: AgentClient, *, rooms: Rooms = outside_a_run, bundle: str | None = None
) -> ValidationReport:
    """`skill-config/v1`: an inline skill (name, description, skill_md) is added (2xx, answering its name), and
    list then shows it; when the card offers the bundle variant, a skill given as an object of the run's store (`rooms`) by a read
    grant too. The probe skills stay (skill-config/v1 has no remove): validate an agent deployed for it."""
    report, probe = await open_extension(agent, "verify_a2a_skill_config", SKILL_CONFIG, "skill_config")
    if probe is None:
        return report
    report.checks.append(same_origin(probe, "skill_config", {"add": "POST", "list": "GET"}))
    if not report.passed:
        return report
    name = f"agent-env-validator-{uuid.uuid4().hex[:8]}"
    description = "A probe skill added by the agent-env validator"
    added = await probe.call(
        "add",
        "POST",
        {"name": name, "description": description, "skill_md": SKILL_MD.format(name=name, description=description)},
    )
    report.checks.append(
        answered(
            "skill_config.add_inline",
            added,
            'serve the add operation\'s inline variant: POST {"name", "description", "skill_md"} answers 2xx',
        )
    )
    if added.ok:
        answered_name = (added.json_object or {}).get("name")
        report.checks.append(
            Finding.ok("skill_config.add_answer")
            if answered_name == name
            else Finding.failed(
                "skill_config.add_answer",
                f"add of {name!r} answered {added.text[:200]!r}: no name, or another",
                'answer an add with {"name": <the skill\'s name>}',
            )
        )
    listed = await probe.call("list", "GET")
    skills = (listed.json_object or {}).get("skills")
    if not listed.ok or not isinstance(skills, dict):
        report.checks.append(
            Finding.failed(
                "skill_config.list",
                listed.said() + ' (wanted 2xx with {"skills": {name: {...}}})',
                'serve the list operation: GET answers {"skills": {<name>: {"description": ...}, ...}}',
            )
        )
    else:
        report.checks.append(Finding.ok("skill_config.list"))
        report.checks.append(
            Finding.ok("skill_config.list_shows_added")
            if name in skills
            else Finding.failed(
                "skill_config.list_shows_added",
                f"after adding {name!r}, list shows {sorted(skills)[:10]}",
                "list every skill added (by its name), as well as the agent's own",
            )
        )
    if probe.offers("add", "skill_bundle"):
        report.checks.extend(await bundle_skill(agent, rooms, bundle))
    return report


# -- install/v1 --

# What an installer fills in a command's {placeholders} (the names the protocol's installer knows); a
# command naming another cannot be run.
INSTALL_PARAMS = frozenset(
    {
        "container",
        "work_dir",
        "agent_ctx_tar",
        "a2a_port",
        "agent_name",
        "workspace_dir",
        "host_workdir",
        "host_user",
        "litellm_api_key",
        "litellm_base_url",
        "litellm_extra_headers",
        "trust_env",
    }
)


async def verify_install(agent: AgentClient) -> ValidationReport:
    """`install/v1` (a declaration, no endpoint): it declares commands into a container (`install_commands`,
    `required_params`), onto a sandbox's host (`install_commands_host`, `required_params_host`), or both; each
    declared is a non-empty list of commands whose `{placeholders}` are all in its params list, which names only
    parameters an installer fills; `a2a_port` is a port."""
    report, probe = await open_extension(agent, "verify_a2a_install", INSTALL, "install")
    if probe is None:
        return report
    params = probe.params
    if "install_commands" not in params and "install_commands_host" not in params:
        report.checks.append(
            Finding.failed(
                "install.install_commands",
                "params declare neither install_commands (into a container) nor install_commands_host (onto a "
                "sandbox's host): nothing says how to install the agent",
                'declare "install_commands": ["<shell command>", ...] with "required_params" (and/or the _host pair)',
            )
        )
    if "install_commands" in params or "required_params" in params:
        report.checks.extend(_commands("install.install_commands", params, "install_commands", "required_params"))
    if "install_commands_host" in params or "required_params_host" in params:
        report.checks.extend(
            _commands("install.install_commands_host", params, "install_commands_host", "required_params_host")
        )
        for key in ("workdir_host", "user_host"):
            if key in params and not (isinstance(params[key], str) and params[key]):
                report.checks.append(
                    Finding.failed(
                        f"install.{key}", f"params.{key} is {params[key]!r}", f"make {key} a non-empty string"
                    )
                )
    report.checks.append(_port(params.get("a2a_port")))
    return report


def _commands(name: str, params: JsonObject, commands_key: str, params_key: str) -> list[Finding]:
    commands = params.get(commands_key)
    if not isinstance(commands, list) or not commands or not all(isinstance(c, str) and c.strip() for c in commands):
        return [
            Finding.failed(
                name,
                f"params.{commands_key} is {str(commands)[:200]}: not a non-empty list of commands",
                f'declare "{commands_key}": ["<shell command>", ...], the commands that install the agent',
            )
        ]
    required = params.get(params_key, [])
    if not isinstance(required, list) or not all(isinstance(p, str) for p in required):
        return [
            Finding.failed(
                f"{name}.{params_key}",
                f"params.{params_key} is {str(required)[:200]}: not a list of names",
                f'declare "{params_key}": ["container", "work_dir", ...], the placeholders the commands use',
            )
        ]
    findings = [Finding.ok(name)]
    unknown = sorted(set(required) - INSTALL_PARAMS)
    findings.append(
        Finding.ok(f"{name}.{params_key}")
        if not unknown
        else Finding.failed(
            f"{name}.{params_key}",
            f"params.{params_key} names {unknown}, which no installer fills",
            f"name only parameters an installer fills: {sorted(INSTALL_PARAMS)}",
        )
    )
    used, malformed = _placeholders(commands)
    unlisted = sorted(used - set(required))
    if malformed or unlisted:
        findings.append(
            Finding.failed(
                f"{name}.placeholders",
                malformed or f"the commands use {unlisted}, which params.{params_key} does not list",
                f"list every {{placeholder}} the commands use in {params_key} (write a literal brace as {{{{ }}}})",
            )
        )
    else:
        findings.append(Finding.ok(f"{name}.placeholders"))
    return findings


def _placeholders(commands: list[Any]) -> tuple[set[str], str]:
    """The `{name}` fields the commands use (as str.format reads them), or why one cannot be read."""
    used: set[str] = set()
    for command in commands:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(command) if f is not None]
        except ValueError as e:
            return used, f"the command {command[:120]!r} is not a valid template ({e})"
        for field in fields:
            base = field.split(".", 1)[0].split("[", 1)[0]
            if not base or base.isdigit():
                return used, f"the command {command[:120]!r} has a positional {{{field}}} field, not a name"
            used.add(base)
    return used, ""


def _port(port: Any) -> Finding:
    if port is None:
        return Finding.failed(
            "install.a2a_port",
            "params.a2a_port is not declared: an installer must be told the port",
            'declare "a2a_port": <the port the installed agent serves A2A on>',
            required=False,
        )
    # (a card's params reach us as JSON numbers: 8000 may read as 8000.0)
    whole = isinstance(port, int | float) and not isinstance(port, bool) and float(port).is_integer()
    if whole and 1 <= int(port) <= 65535:
        return Finding.ok("install.a2a_port")
    return Finding.failed(
        "install.a2a_port", f"params.a2a_port is {port!r}: not a port", "make a2a_port an integer in 1..65535"
    )
