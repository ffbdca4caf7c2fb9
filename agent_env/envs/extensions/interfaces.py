"""`urn:agentenv:get-interfaces/v1`: interface manifests, the structure renderers (a CLI, a GUI) are generated from.

The card names the index in `params.endpoint` (`INTERFACE_MANIFEST_PATH`): GET there lists the interfaces served,
GET `<endpoint>/<interface>` answers one manifest. We serve the `cli` projection, built from the app's tools: an
app declares no entities (records with list/get/create/... operations), so every tool agents see is an action,
its params from its input schema. Hidden tools are plumbing for a harness, not commands, so they are left out.
Manifests hold structure only, never the environment's data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agentenv_protocol.manifest import (
    GET_INTERFACES_EXTENSION_URI,
    INTERFACE_MANIFEST_PATH,
    CliAction,
    CliManifest,
    ParamSpec,
)
from agentenv_protocol.types import EnvironmentExtension
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agent_env.envs.app import ToolInfo

URI = GET_INTERFACES_EXTENSION_URI
INTERFACES = ("cli",)
CARD = EnvironmentExtension(
    uri=URI,
    description="Interface manifests of this environment's tools: GET the endpoint for their names, "
    "<endpoint>/<interface> for one (cli).",
    params={"endpoint": INTERFACE_MANIFEST_PATH},
)
Schema = Mapping[str, object]


def _branch(schema: Schema, defs: Schema) -> Schema:
    """The schema a value takes, past an optional's `anyOf [..., null]` and a `$ref` into `$defs`."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        schema = next((o for o in options if isinstance(o, Mapping) and o.get("type") != "null"), schema)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found = defs.get(ref.removeprefix("#/$defs/"))
        schema = found if isinstance(found, Mapping) else schema
    return schema


def _type(schema: Schema) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind if isinstance(kind, str) else "string"


def params(input_schema: Schema) -> list[ParamSpec]:
    """A tool's input schema as the manifest's params: name, type, item type, required, allowed values."""
    defs = input_schema.get("$defs")
    defs = defs if isinstance(defs, Mapping) else {}
    properties = input_schema.get("properties")
    required = input_schema.get("required")
    required = required if isinstance(required, list) else []
    specs = []
    for name, raw in (properties if isinstance(properties, Mapping) else {}).items():
        schema = _branch(raw if isinstance(raw, Mapping) else {}, defs)
        items = schema.get("items")
        enum = schema.get("enum")
        specs.append(
            ParamSpec(
                name=name,
                type=_type(schema),
                item_type=_type(_branch(items, defs)) if isinstance(items, Mapping) else None,
                required=name in required,
                enum=[str(v) for v in enum] if isinstance(enum, list) else None,
            )
        )
    return specs


def cli_manifest(service: str, tools: Iterable[ToolInfo]) -> CliManifest:
    return CliManifest(
        service=service,
        actions=[
            CliAction(
                name=t.name.replace("_", "-"), tool=t.name, params=params(t.input_schema), description=t.description
            )
            for t in tools
            if not t.hidden
        ],
    )


def routes(service: str, tools: Iterable[ToolInfo]) -> list[Route]:
    """The index and each manifest, made once: they change only with the app's code."""
    manifests = {"cli": cli_manifest(service, tools).model_dump(mode="json", exclude_none=True)}

    async def index(request: Request) -> JSONResponse:
        return JSONResponse(list(INTERFACES))

    async def manifest(request: Request) -> JSONResponse:
        interface = request.path_params["interface"]
        if interface not in manifests:
            return JSONResponse(
                {"error": f"no interface {interface[:64]!r} here; this server serves {', '.join(INTERFACES)}"},
                status_code=404,
            )
        return JSONResponse(manifests[interface])

    return [
        Route(INTERFACE_MANIFEST_PATH, index, methods=["GET"]),
        Route(INTERFACE_MANIFEST_PATH + "/{interface}", manifest, methods=["GET"]),
    ]
