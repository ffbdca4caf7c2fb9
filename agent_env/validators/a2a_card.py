"""`verify_a2a_agent_card`: the agent's card has what the A2A spec requires, a JSON-RPC interface on the agent's
own origin, and every `urn:agentenv:*` extension it declares is well formed and served: each operation the
extension defines answers at the path the card gives, on the agent's origin.

An operation is probed harmlessly: a GET (list, get, state) must answer a JSON object with the fields the card
says it returns; a POST or PUT gets an empty object, which a served operation refuses as a bad request (or
takes as a no-op) — only "no such route" (404, 405) or a server error says it is not served.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin

import httpx

from agent_env.config import url_origin
from agent_env.validators.a2a_wire import A2AEndpoint, AgentUnanswered, extension_call, fetch_card, json_of
from agent_env.validators.report import Finding, ValidationReport

VALIDATOR = "verify_a2a_agent_card"
# The A2A spec's required card fields (an interface too: 1.0's supportedInterfaces or 0.3's url, checked apart).
REQUIRED_FIELDS = {
    "name": str,
    "description": str,
    "version": str,
    "capabilities": dict,
    "defaultInputModes": list,
    "defaultOutputModes": list,
    "skills": list,
}
OPTIONAL_FIELDS = ("provider", "documentationUrl")
SKILL_FIELDS = ("id", "name", "description", "tags")
MEDIA_TYPE = re.compile(r"^[A-Za-z0-9][\w.+-]*/[\w.+*-]+$")
LEGACY_MODES = {"text", "file", "data"}  # A2A 0.2 examples name kinds, not media types

# Protocol v1's agent extensions: their operations (method, default path); an operation the card omits from
# `methods` is still at the extension's endpoint. Optional features (agent-config's `get`) only when declared.
PROTOCOL_EXTENSIONS: dict[str, dict[str, tuple[str, str]]] = {
    "urn:agentenv:agent-config/v1": {"set": ("POST", "/ext/agent-config")},
    "urn:agentenv:mcp-config/v1": {"add": ("POST", "/ext/mcp-config"), "list": ("GET", "/ext/mcp-config")},
    "urn:agentenv:skill-config/v1": {"add": ("POST", "/ext/skill-config"), "list": ("GET", "/ext/skill-config")},
    "urn:agentenv:trajectory/v1": {"get": ("POST", "/ext/trajectory")},
    "urn:agentenv:snapshot/v1": {"save": ("POST", "/ext/snapshot"), "load": ("PUT", "/ext/snapshot")},
    "urn:agentenv:peer-agents/v1": {"set": ("POST", "/ext/peer-agents"), "list": ("GET", "/ext/peer-agents")},
    "urn:agentenv:attribution-probe/v1": {"probe": ("POST", "/ext/attribution-probe")},
    "urn:agentenv:triggers/v1": {
        "register": ("POST", "/ext/triggers"),
        "decide": ("POST", "/ext/triggers/decide"),
        "state": ("GET", "/ext/triggers"),
    },
    "urn:agentenv:proxy/v1": {
        name: ("POST", f"/ext/proxy/{name}") for name in ("claim", "next", "tools", "act", "result", "record", "reply")
    },
    "urn:agentenv:install/v1": {},  # declarations only: no endpoint
    "urn:agentenv:staging/v1": {},  # an object area under its endpoint, no operations to probe
    "urn:agentenv:tools/v1": {},
}
HTTP_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


def short(uri: str) -> str:
    return uri.removeprefix("urn:agentenv:")


def check_fields(agent: A2AEndpoint) -> list[Finding]:
    """The card's fields, its interface and its skills (no network)."""
    card, found = agent.card, []
    for name, kind in REQUIRED_FIELDS.items():
        value = card.get(name)
        if not isinstance(value, kind) or (kind is str and not value.strip()):
            what = "missing" if name not in card else f"a {type(value).__name__}, not a {kind.__name__}"
            found.append(
                Finding.failed(
                    f"card.{name}",
                    f"the card's `{name}` is {'empty' if value == '' else what}",
                    f"give the card a non-empty `{name}` ({kind.__name__}), as the A2A spec requires",
                )
            )
        else:
            found.append(Finding.ok(f"card.{name}"))
    if agent.rpc_url:
        found.append(Finding.ok("card.interface"))
    else:
        found.append(
            Finding.failed(
                "card.interface",
                f"no JSON-RPC interface to use: {'; '.join(agent.problems)}",
                "list the agent's JSON-RPC URL in `supportedInterfaces` (A2A 1.0, protocolBinding JSONRPC) or `url` "
                "(A2A 0.3), on the origin the card is served from (a relative URL resolves against the card's)",
            )
        )
    for field in ("defaultInputModes", "defaultOutputModes"):
        modes = card.get(field)
        if isinstance(modes, list):
            bad = [m for m in modes if not isinstance(m, str) or not (MEDIA_TYPE.match(m) or m in LEGACY_MODES)]
            if not modes or bad:
                found.append(
                    Finding.failed(
                        f"card.{field}.media_types",
                        f"`{field}` is {'empty' if not modes else 'not media types: ' + repr(bad)[:200]}",
                        f'list the media types the agent takes or gives in `{field}`, e.g. ["text/plain"]',
                    )
                )
            else:
                found.append(Finding.ok(f"card.{field}.media_types"))
    skills = card.get("skills")
    for i, skill in enumerate(skills if isinstance(skills, list) else []):
        lacking = [f for f in SKILL_FIELDS if not isinstance(skill, dict) or f not in skill]
        found.append(
            Finding.failed(
                f"card.skills[{i}]",
                f"skill {i} lacks {', '.join(lacking)}",
                "give every skill an id, name, description and tags (a list, possibly empty)",
            )
            if lacking
            else Finding.ok(f"card.skills[{i}]")
        )
    for name in OPTIONAL_FIELDS:
        found.append(
            Finding.ok(f"card.{name}", required=False)
            if card.get(name)
            else Finding.failed(
                f"card.{name}", f"the card has no `{name}`", f"add `{name}` (optional in A2A)", required=False
            )
        )
    return found


def check_declarations(agent: A2AEndpoint) -> list[Finding]:
    """Each declared extension well formed: a URI, params with an absolute endpoint on the agent's origin,
    methods with HTTP verbs (no network)."""
    found = []
    capabilities = agent.card.get("capabilities")
    listed = capabilities.get("extensions", []) if isinstance(capabilities, dict) else []
    if not isinstance(listed, list):
        return [Finding.failed("card.capabilities.extensions", "is not a list", "make it a list of extension objects")]
    for i, entry in enumerate(listed):
        if not isinstance(entry, dict) or not isinstance(entry.get("uri"), str) or not entry["uri"]:
            found.append(
                Finding.failed(
                    f"ext[{i}].uri", f"extension {i} has no `uri`", "give every extension its URI (a non-empty string)"
                )
            )
            continue
        uri = entry["uri"]
        if not uri.startswith("urn:agentenv:"):
            continue  # others' extensions: their shape is theirs
        name = short(uri)
        if uri not in PROTOCOL_EXTENSIONS:
            found.append(
                Finding.failed(
                    f"ext.{name}.known",
                    f"{uri} is not an extension of agentenv protocol v1",
                    "check the URI's spelling and version (e.g. urn:agentenv:mcp-config/v1)",
                    required=False,
                )
            )
            continue
        params = entry.get("params", {})
        problems = []
        if not isinstance(params, dict):
            problems.append("`params` is not an object")
            params = {}
        endpoint = params.get("endpoint")
        if endpoint is not None and (not isinstance(endpoint, str) or not endpoint.startswith("/")):
            problems.append(f"`params.endpoint` {endpoint!r} is not an absolute path")
        methods = params.get("methods", {})
        if not isinstance(methods, dict):
            problems.append("`params.methods` is not an object")
            methods = {}
        for op, spec in methods.items():
            if not isinstance(spec, dict):
                problems.append(f"method {op!r} is not an object")
                continue
            if str(spec.get("method", "POST")).upper() not in HTTP_METHODS:
                problems.append(f"method {op!r} has HTTP method {spec.get('method')!r}")
            path = spec.get("endpoint", endpoint or "/")
            if not isinstance(path, str) or url_origin(urljoin(agent.url, path)) != agent.origin:
                problems.append(f"method {op!r} is at {path!r}, not a path on the agent's origin")
        found.append(
            Finding.failed(
                f"ext.{name}.params",
                f"{uri}: {'; '.join(problems)}",
                'declare `params` as {"endpoint": "/ext/...", "methods": {NAME: {"method": "POST"}}}, '
                "paths on the agent's own origin",
            )
            if problems
            else Finding.ok(f"ext.{name}.params")
        )
    return found


async def probe_operations(http: httpx.AsyncClient, agent: A2AEndpoint) -> list[Finding]:
    """Each operation of each declared agentenv extension answers where the card says it is."""
    found = []
    for uri, params in agent.extensions().items():
        operations = dict(PROTOCOL_EXTENSIONS.get(uri, {}))
        if uri not in PROTOCOL_EXTENSIONS:
            continue
        declared = params.get("methods")
        methods = declared if isinstance(declared, dict) else {}
        endpoint = params.get("endpoint") if isinstance(params.get("endpoint"), str) else None
        for op, spec in methods.items():  # declared beyond the core ones (features: agent-config's get ...)
            if isinstance(spec, dict) and op not in operations:
                operations[op] = (str(spec.get("method", "POST")).upper(), endpoint or "/")
        for op, (method, path) in operations.items():
            found.append(await _probe(http, agent, uri, op, method, endpoint or path, methods.get(op)))
    return found


async def _probe(
    http: httpx.AsyncClient, agent: A2AEndpoint, uri: str, op: str, method: str, path: str, spec: object
) -> Finding:
    check = f"ext.{short(uri)}.{op}.served"
    declared_method = str(spec.get("method", method)).upper() if isinstance(spec, dict) else method
    fix = f"serve {uri} `{op}` ({declared_method}) at the path the card declares, or stop declaring the extension"
    try:
        response = await extension_call(http, agent, uri, op, method, path, None if method == "GET" else {})
    except AgentUnanswered as e:
        return Finding.failed(check, str(e), fix)
    where = f"{response.request.method} {response.request.url}"
    if response.status_code in (404, 405) or response.status_code >= 500:
        return Finding.failed(check, f"{where} answered {response.status_code}: not served", fix)
    if declared_method == "GET":
        body = json_of(response)
        wanted = (spec.get("response") or {}).get("required", []) if isinstance(spec, dict) else []
        missing = [k for k in wanted if not isinstance(body, dict) or k not in body]
        if response.status_code != 200 or not isinstance(body, dict) or missing:
            return Finding.failed(
                check,
                f"{where} answered {response.status_code} "
                + (f"without {', '.join(missing)}" if missing else "with no JSON object"),
                f"answer {uri} `{op}` with a JSON object holding {', '.join(wanted) or 'its fields'}",
            )
    return Finding.ok(check)


async def verify_agent_card(http: httpx.AsyncClient, url: str) -> ValidationReport:
    report = ValidationReport(validator=VALIDATOR, target=url)
    try:
        agent = await fetch_card(http, url)
    except AgentUnanswered as e:
        report.checks.append(
            Finding.failed(
                "card.served",
                str(e),
                "serve the agent card at /.well-known/agent-card.json on the agent's URL (a2a SDKs do)",
            )
        )
        return report
    report.checks.append(Finding.ok("card.served"))
    report.checks += check_fields(agent) + check_declarations(agent) + await probe_operations(http, agent)
    return report


def extension_declared(agent: A2AEndpoint, uri: str, check: str) -> Finding:
    """Shared by the extension validators: the card declares `uri`."""
    if uri in agent.extensions():
        return Finding.ok(check)
    paths = sorted({path for _, path in PROTOCOL_EXTENSIONS.get(uri, {}).values()})
    return Finding.failed(
        check,
        f"the card does not declare {uri} (capabilities.extensions)",
        f"declare and serve {uri} (at {', '.join(paths) or 'its endpoint'}, as the reference framework and "
        "agent_env.agents.sdk do)",
    )
