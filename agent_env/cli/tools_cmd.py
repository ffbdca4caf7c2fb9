"""`agent-env tools list|call|token`: an environment's tools from the shell, as one of its agents.

`call` is generated from the tool's JSON Schema: `agent-env tools call INSTANCE send_email --to a@b.c
--subject Hi --body "..."` (arrays take repeated flags or JSON, objects take JSON, `--flag` alone is
true for booleans). `--json '{...}'` gives all the arguments at once. `installed_cli` is the same for the command
the build_mcp_cli step installs in a sandbox: one environment, as the agent whose token is beside it.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, cast

from agent_env.cli import aio
from agent_env.cli.output import console
from agent_env.config import load_settings
from agent_env.errors import BadInput

if TYPE_CHECKING:
    from agent_env.gateway_client import GatewayClient
    from agent_env.gateway_client.wire import JsonObject


async def _client_and_instance(instance: str):
    from agent_env.gateway.embedded import connect
    from agent_env.gateway_client import GatewayRefused

    client = connect(load_settings())
    try:
        return client, await client.get_instance(instance)
    except GatewayRefused as e:
        if e.status == 404:
            ids = [i["id"] for i in await client.list_instances()]
            matches = [i for i in ids if i.startswith(instance) or i.endswith("." + instance)]
            if len(matches) == 1:
                return client, await client.get_instance(matches[0])
            raise BadInput(
                f"no environment instance {instance!r}" + (f" (matches: {', '.join(matches)})" if matches else ""),
                "give an instance id (RUN_ID.STEP_ID); `agent-env runs show RUN` lists a run's",
            ) from None
        raise


def _agent(described: dict, agent: str | None) -> str:
    agents = described["agents"]
    if agent is None:
        if len(agents) == 1:
            return next(iter(agents))
        raise BadInput(f"instance {described['id']} has several agents: {', '.join(agents)}", "choose one with --as")
    if agent not in agents:
        raise BadInput(f"no agent {agent!r} in instance {described['id']}", f"agents: {', '.join(agents)}")
    return agent


def list_command(instance: str, agent: str | None, json_out: bool) -> int:
    async def go() -> int:
        client, described = await _client_and_instance(instance)
        who = _agent(described, agent)
        tools = await client.list_tools(described["id"], await client.token(described["id"], who))
        return show_tools(tools, f"[bold]{described['id']}[/] as {who} (role {described['agents'][who]})", json_out)

    return aio.run(go())


def show_tools(tools: list[JsonObject], header: str, json_out: bool) -> int:
    """The tools an agent sees, with the flags `call` takes for each (or as JSON)."""
    if json_out:
        print(json.dumps(tools, indent=2))
        return 0
    console().print(f"{header}: {len(tools)} tools")
    for tool in tools:
        params = tool["inputSchema"].get("properties", {})
        required = set(tool["inputSchema"].get("required", []))
        args = " ".join(f"--{n.replace('_', '-')}" + ("" if n in required else "?") for n in params)
        console().print(f"  [bold]{tool['name']}[/] {args}\n      [dim]{tool['description'].splitlines()[0]}[/]")
    return 0


def parse_arguments(schema: dict[str, Any], argv: list[str], raw_json: str | None) -> dict[str, Any]:
    """Turn `--name value` pairs into arguments typed by the tool's schema."""
    if raw_json:
        try:
            given = json.loads(raw_json)
        except ValueError as e:
            raise BadInput(f"--json is not valid JSON: {e}", "quote the whole object: --json '{\"key\": 1}'") from None
        if not isinstance(given, dict):
            raise BadInput("--json must be a JSON object of arguments")
        return given
    props = schema.get("properties", {})
    args: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if not flag.startswith("--"):
            raise BadInput(f"unexpected {flag!r}", "give arguments as --name value")
        name = flag[2:].replace("-", "_")
        if name not in props:
            raise BadInput(
                f"this tool has no argument {flag!r}",
                "arguments: " + ", ".join("--" + n.replace("_", "-") for n in props),
            )
        kind = _kind(props[name])
        takes_value = kind != "boolean" or (i + 1 < len(argv) and argv[i + 1] in ("true", "false"))
        value = argv[i + 1] if takes_value and i + 1 < len(argv) else None
        if takes_value and value is None:
            raise BadInput(f"{flag} needs a value")
        i += 2 if takes_value else 1
        parsed = _convert(kind, cast(str, value), flag) if takes_value else True  # (a value: checked above)
        if kind == "array" and not (value or "").lstrip().startswith("["):
            args.setdefault(name, []).append(parsed)
        else:
            args[name] = parsed
    return args


def _kind(prop: dict[str, Any]) -> str:
    if "type" in prop:
        return prop["type"]
    for option in prop.get("anyOf", []):
        if option.get("type") not in (None, "null"):
            return option["type"]
    return "string"


def _convert(kind: str, value: str, flag: str) -> Any:
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
        if kind == "boolean":
            return value == "true"
        if kind in ("object",) or (kind == "array" and value.lstrip().startswith("[")):
            return json.loads(value)
    except ValueError:
        raise BadInput(f"{flag}: {value!r} is not a valid {kind}") from None
    return value


def call_command(instance: str, tool: str, agent: str | None, raw_json: str | None, argv: list[str]) -> int:
    async def go() -> int:
        client, described = await _client_and_instance(instance)
        who = _agent(described, agent)
        token = await client.token(described["id"], who)
        return await call_as(
            client, described["id"], token, f"{who} (role {described['agents'][who]})", tool, raw_json, argv
        )

    return aio.run(go())


async def call_as(
    client: GatewayClient, instance: str, token: str, who: str, tool: str, raw_json: str | None, argv: list[str]
) -> int:
    """Call `tool` with arguments parsed from `argv` by its schema, as the agent whose token this is: the gateway
    lists and allows only what its role may call."""
    from agent_env.gateway_client import GatewayRefused

    tools = {t["name"]: t for t in await client.list_tools(instance, token)}
    if tool not in tools:
        raise BadInput(f"{who} has no tool {tool!r}", f"tools: {', '.join(tools)}")
    if "--help" in argv or "-h" in argv:
        console().print(f"[bold]{tool}[/]: {tools[tool]['description']}")
        for name, prop in tools[tool]["inputSchema"].get("properties", {}).items():
            console().print(f"  --{name.replace('_', '-')}  [dim]{_kind(prop)}[/]  {prop.get('description', '')}")
        return 0
    arguments = parse_arguments(tools[tool]["inputSchema"], argv, raw_json)
    try:
        result = await client.call_tool(instance, token, tool, arguments)
    except GatewayRefused as e:
        console().print(f"[red]{tool} failed:[/] {e}")
        return 1
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


def token_command(instance: str, agent: str) -> int:
    async def go() -> int:
        client, described = await _client_and_instance(instance)
        print(await client.token(described["id"], _agent(described, agent)))
        return 0

    return aio.run(go())


# -- the command build_mcp_cli puts in a sandbox: these same commands, for one environment, as one agent --

SETTINGS_FILE = ".env"  # beside the command (bin/.env), 0600: where the gateway is, which instance, the token
SETTINGS_KEYS = ("gateway_url", "instance", "agent", "role", "token")


def installed_cli(command: str, script: str, argv: list[str]) -> int:
    """`COMMAND [list [--json]]` lists the tools; `COMMAND TOOL --name value ...` calls one (`-` or `_` in its
    name), `TOOL --help` shows its arguments. It acts as the agent whose token `.env` beside `script` holds, so
    the gateway applies that agent's role: what it may see and call, and every limit, as for the agent itself."""
    from pathlib import Path

    from agent_env.gateway_client import GatewayRefused
    from agent_env.gateway_client.single import SingleGateway

    settings_path = Path(script).resolve().parent / SETTINGS_FILE
    try:
        lines = settings_path.read_text().splitlines()
    except OSError:
        print(f"{command}: no {settings_path}: this command is installed by the build_mcp_cli step", file=sys.stderr)
        return 2
    found = dict(line.partition("=")[::2] for line in lines if "=" in line)
    if missing := [k for k in SETTINGS_KEYS if not found.get(k)]:
        print(f"{command}: {settings_path} lacks {', '.join(missing)}: install it again", file=sys.stderr)
        return 2
    who = f"{found['agent']} (role {found['role']})"

    async def go() -> int:
        async with SingleGateway(found["gateway_url"]) as client:
            if not argv or argv[0] in ("list", "--help", "-h"):
                tools = await client.list_tools(found["instance"], found["token"])
                header = f"{command}: {found['instance']} as {who}; `{command} TOOL --help` for one's arguments"
                return show_tools(tools, header, "--json" in argv)
            raw_json = None
            rest = list(argv[1:])
            if "--json" in rest:
                at = rest.index("--json")
                raw_json = rest[at + 1] if at + 1 < len(rest) else "{}"
                del rest[at : at + 2]
            tool = argv[0].replace("-", "_")
            return await call_as(client, found["instance"], found["token"], who, tool, raw_json, rest)

    try:
        return aio.run(go())
    except (BadInput, GatewayRefused) as e:  # a tool its role does not allow, a token the gateway refuses
        print(f"{command}: {e}", file=sys.stderr)
        return 2
