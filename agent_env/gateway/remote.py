"""An app served by its own process and reached like any remote env server: MCP for tools, the
open agent-env protocol's data plane for data. Used for `run = "subprocess"` apps, sandboxed apps and
apps at a URL. A plain MCP server (no agent-env card) has no data plane: it holds no data to load,
reset, export or snapshot.

A server the framework started (a subprocess, a sandbox) answers only requests carrying its token
(SECURITY.md, "Roles"): RemoteApp sends it as a bearer on every MCP and data-plane request, and only to that
server's own origin.

The MCP session lives in one background task (the SDK's client must be entered and left in the same
task); calls reach it through a queue and run concurrently inside it. A session that broke (the server
restarted, the connection dropped) is opened again by the next call; a call that never reached the
server (refused connection, unknown session) is sent once more on the new session.

Every request has a deadline, per kind of operation (see the *_TIMEOUT constants below). A subprocess
app dies with the gateway, however the gateway ends (on Linux: the parent-death signal).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
from collections.abc import Generator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import httpx2 as httpx
from agentenv_protocol.transfers import WriteNamespaceGrant
from agentenv_protocol.types import (
    DATA_OBJECTS_EXTENSION_URI,
    METHOD_ADD,
    METHOD_GET,
    METHOD_RESET,
    RPC_PATH,
    WELL_KNOWN_PATH,
    AddDataRequest,
    DataPart,
    EnvironmentCard,
    GetDataResponse,
    Part,
)
from pydantic import ValidationError

from agent_env import json_depth, telemetry, tls, waiting
from agent_env.daemon import tail
from agent_env.envs.app import ToolError, ToolInfo
from agent_env.envs.card import HIDDEN_BY_DEFAULT_META_KEY, OPERATIONS
from agent_env.envs.context import META_IDEMPOTENCY_KEY, Ctx
from agent_env.gateway.app_process import AppProcess, start_server
from agent_env.ports import free_port
from agent_env.stores.transfer import reaches

if TYPE_CHECKING:  # mcp is imported where a session opens (it is heavy)
    from mcp import Client
    from mcp.types import CallToolResult, RequestParamsMeta

    from agent_env.gateway_client.wire import JsonObject

    _Call = tuple[str, JsonObject, RequestParamsMeta, asyncio.Future[CallToolResult]]
    """A tool call queued for the session: name, arguments, _meta, where its result goes."""

START_TIMEOUT = 30.0  # for a server to start listening
CONNECT_TIMEOUT = 10.0  # to open a TCP (TLS) connection to a server that listens
PROBE_TIMEOUT = 10.0  # its card and /ready
DATA_TIMEOUT = 300.0  # a data-plane call: load, reset, export (all of an app's data)
CALL_TIMEOUT = 300.0  # one tool call, end to end


def _leaf(error: BaseException) -> BaseException:
    """The first real error inside task-group wrappers (what to tell the user)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _session_gone(error: BaseException) -> bool:
    """The call never reached a server: no connection, or a session the (restarted) server does not know."""
    error = _leaf(error)
    if isinstance(error, httpx.ConnectError):
        return True
    text = str(error).lower()
    return "session not found" in text or "session terminated" in text


class ServerBearer(httpx.Auth):
    """The server's token, on requests to its own origin only (not after a redirect elsewhere)."""

    def __init__(self, token: str, base_url: str) -> None:
        url = httpx.URL(base_url)
        self.token, self.origin = token, (url.scheme, url.host, url.port)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if (request.url.scheme, request.url.host, request.url.port) == self.origin:
            request.headers["authorization"] = f"Bearer {self.token}"
        yield request


class CardExtensions:
    """The extensions a remote app's card declares (e.g. tool access, its clock: gateway/foreign.py uses them), and
    calling their methods at the endpoints and with the verbs the card gives."""

    name: str
    base_url: str
    _http: httpx.AsyncClient
    extensions: Mapping[str, JsonObject] = MappingProxyType({})  # each one's params, by URI
    card: EnvironmentCard | None = None  # as it serves it (composition.py nests it in the instance's card)

    def _declared_operations(self, answer: httpx.Response) -> list[str]:
        raise NotImplementedError

    def _read_card(self, answer: httpx.Response) -> list[str]:
        """The card's data-plane methods (checked as RemoteApp does), its extensions noted."""
        operations = self._declared_operations(answer)
        self.card = card = EnvironmentCard.model_validate_json(answer.content)
        self.extensions = {e.uri: e.params or {} for e in (card.capabilities.extensions or [])}
        return operations

    def declares(self, uri: str, method: str) -> bool:
        return isinstance((self.extensions.get(uri, {}).get("methods") or {}).get(method), dict)

    async def invoke(self, uri: str, method: str, body: JsonObject) -> None:
        """Call a method the card declares (`declares`), at its path relative to the server's base; an answer other
        than 2xx is a ToolError naming it and what the server said (its first 1,000 bytes)."""
        params = self.extensions[uri]
        op = params["methods"][method]
        endpoint, verb = op.get("endpoint") or params.get("endpoint"), str(op.get("method") or "POST").upper()
        if not isinstance(endpoint, str) or not endpoint.startswith("/") or endpoint.startswith("//"):  # no other host
            raise ToolError(
                f"app {self.name!r} declares {uri} {method} with no path relative to its base: {endpoint!r}"
            )
        said = b""
        async with self._http.stream(verb, endpoint, json=body, timeout=PROBE_TIMEOUT) as answer:
            if answer.is_success:
                return
            async for chunk in answer.aiter_bytes():  # what it says, not whatever it sends
                said += chunk
                if len(said) >= 1000:
                    break
        raise ToolError(
            f"app {self.name!r} at {self.base_url} answered {uri} {method} with {answer.status_code}: "
            f"{said[:1000].decode(errors='replace')}"
        )

    async def relay(
        self, verb: str, path: str, query: str, body: bytes, headers: dict[str, str], limit: int
    ) -> tuple[int, str | None, bytes | None]:
        """A request to a path of the server's own (composition.py checks which), with its token and no other
        credential: (status, content type, the answer's bytes, or None past `limit` bytes)."""
        said = b""
        url = quote(path) + (f"?{query}" if query else "")
        async with self._http.stream(verb, url, content=body, headers=headers) as answer:
            async for chunk in answer.aiter_bytes():
                said += chunk
                if len(said) > limit:
                    return answer.status_code, None, None
            return answer.status_code, answer.headers.get("content-type"), said


class RemoteApp(CardExtensions):
    def __init__(
        self, name: str, base_url: str, proc: AppProcess | None, mcp_path: str = "/mcp", token: str | None = None
    ) -> None:
        self.name, self.base_url, self.proc, self.mcp_path = name, base_url.rstrip("/"), proc, mcp_path
        self.operations: list[str] = list(OPERATIONS)  # the data-plane methods its card declares
        self.tools: dict[str, ToolInfo] = {}
        self._auth = ServerBearer(token, self.base_url) if token else None
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            verify=tls.context(),
            auth=self._auth,
            timeout=httpx.Timeout(DATA_TIMEOUT, connect=CONNECT_TIMEOUT),
            event_hooks=telemetry.HTTP_HOOKS,  # calls into env servers continue the caller's trace
        )
        self._calls: asyncio.Queue[_Call] = asyncio.Queue()
        self._session_task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Future[CallToolResult]] = set()  # answers the current session owes
        self._connecting: asyncio.Lock = asyncio.Lock()

    @classmethod
    async def spawn(cls, target: str, name: str, folder: Path) -> RemoteApp:
        """Start `agent-env env serve` for the app on a free local port and connect to it. Its token is
        new for each process and handed over in its environment (a command line is public in `ps`)."""
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        token = secrets.token_urlsafe(32)
        proc = start_server(target, port, folder, token)
        app = cls(name, f"http://127.0.0.1:{port}", proc, token=token)
        try:
            await app._wait_ready(folder / "server.log")
            app.operations = app._read_card(await app._http.get(WELL_KNOWN_PATH, timeout=PROBE_TIMEOUT))
            await app._connect()
        except BaseException:
            await app.close()
            raise
        return app

    @classmethod
    async def connect(
        cls, name: str, base_url: str, mcp_path: str = "/mcp", timeout: float = START_TIMEOUT, token: str | None = None
    ) -> RemoteApp:
        """Reach a running MCP server (e.g. in a sandbox), waiting up to `timeout` for it to listen;
        `token`: the one it was started with."""
        app = cls(name, base_url, None, mcp_path, token)
        try:
            try:
                card = await waiting.until(
                    lambda: app._http.get(WELL_KNOWN_PATH, timeout=PROBE_TIMEOUT),
                    what=f"app {name!r}",
                    timeout=timeout,
                    interval=0.02,
                    retry_on=(httpx.TransportError,),
                )
            except waiting.TimedOut as e:
                raise RuntimeError(
                    f"app {name!r} did not answer at {app.base_url} within {timeout:.0f}s ({type(e.last).__name__})"
                ) from None
            if card.status_code == 401:
                raise RuntimeError(
                    f"app {name!r} at {app.base_url} refused the gateway's server token: was its "
                    "sandbox started by this gateway's deploy_env? Redeploy the environment"
                )
            app.operations = app._read_card(card) if card.status_code == 200 else []
            await app._connect()
        except BaseException:
            await app.close()
            raise
        return app

    @property
    def data_plane(self) -> bool:
        """Whether it has a data plane: a plain MCP server (no agent-env card) has none."""
        return bool(self.operations)

    def _declared_operations(self, answer: httpx.Response) -> list[str]:
        """The data-plane methods of the card it answered, read as the protocol's EnvironmentCard (one without
        `capabilities.operations`, as cards before that field, serves all three)."""
        try:
            card = EnvironmentCard.model_validate_json(answer.content)
        except ValidationError as e:
            raise RuntimeError(
                f"app {self.name!r} at {self.base_url} answers {WELL_KNOWN_PATH} with no valid agent-env card "
                f"({str(e)[:500]}): serve the protocol's EnvironmentCard there, or nothing (a plain MCP server)"
            ) from None
        declared = card.capabilities.operations
        return list(OPERATIONS) if declared is None else [m for m in OPERATIONS if m in declared]

    async def _wait_ready(self, log: Path) -> None:
        async def ready() -> bool | None:
            return (await self._http.get("/ready", timeout=PROBE_TIMEOUT)).status_code == 200 or None

        async def still_running() -> None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"app {self.name!r} exited while starting:\n{tail(log)}")

        try:
            await waiting.until(
                ready,
                what=f"app {self.name!r}",
                timeout=START_TIMEOUT,
                interval=0.05,
                retry_on=(httpx.TransportError,),
                check=still_running,
            )
        except waiting.TimedOut:
            raise RuntimeError(
                f"app {self.name!r} did not answer at {self.base_url} within {START_TIMEOUT:.0f}s"
            ) from None

    async def _connect(self) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._calls = asyncio.Queue()  # calls queued for a broken session are failed, not replayed
        self._session_task = asyncio.create_task(self._hold_session(ready))
        try:
            async with asyncio.timeout(START_TIMEOUT):
                await ready
        except TimeoutError:
            await self._drop_session()
            raise RuntimeError(
                f"app {self.name!r} at {self.base_url} did not open an MCP session within {START_TIMEOUT:.0f}s"
            ) from None

    async def _drop_session(self) -> None:
        task, self._session_task = self._session_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _session(self) -> None:
        """A live MCP session: the current one, or a new one if it broke (the server restarted)."""
        if self._session_task is not None and not self._session_task.done():
            return
        async with self._connecting:  # concurrent calls open one session, not one each
            if self._session_task is None or self._session_task.done():
                await self._drop_session()
                try:
                    await self._connect()
                except Exception as e:
                    leaf = _leaf(e)
                    raise RuntimeError(
                        f"app {self.name!r} at {self.base_url} is not reachable "
                        f"({type(leaf).__name__}: {leaf}); is its server running?"
                    ) from None

    async def _hold_session(self, ready: asyncio.Future[None]) -> None:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        timeout = httpx.Timeout(CALL_TIMEOUT, connect=CONNECT_TIMEOUT)
        try:
            async with (
                create_mcp_http_client(auth=self._auth, timeout=timeout) as http,
                Client(streamable_http_client(f"{self.base_url}{self.mcp_path}", http_client=http)) as client,
            ):
                listed = (await client.list_tools()).tools
                self.tools = {
                    t.name: ToolInfo(
                        name=t.name,
                        app=self.name,
                        description=t.description or "",
                        input_schema=t.input_schema,
                        read_only=bool(t.annotations and t.annotations.read_only_hint),
                        hidden=bool((t.meta or {}).get(HIDDEN_BY_DEFAULT_META_KEY)),
                    )
                    for t in listed
                }
                ready.set_result(None)
                async with asyncio.TaskGroup() as group:
                    while True:
                        name, arguments, meta, answer = await self._calls.get()
                        group.create_task(_serve(client, name, arguments, meta, answer))
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
            raise
        finally:  # the session is over: nothing it owes will come (not resent: it may have reached the app)
            for answer in list(self._pending):
                if not answer.done():
                    answer.set_exception(
                        RuntimeError(
                            f"the connection to app {self.name!r} at {self.base_url} "
                            "broke before it answered; the next call reconnects"
                        )
                    )

    async def _call_once(self, name: str, arguments: dict[str, Any], ctx: Ctx) -> CallToolResult:
        """Call on the live session; if the call never reached the server, reconnect and send it once more."""
        for attempt in (1, 2):
            await self._session()
            answer: asyncio.Future[CallToolResult] = asyncio.get_running_loop().create_future()
            self._pending.add(answer)
            # our keys are the _meta's extra items (it allows any): none of MCP's own
            meta = cast("RequestParamsMeta", ctx.to_meta())
            try:
                await self._calls.put((name, arguments, meta, answer))
                return await answer
            except Exception as e:
                if not _session_gone(e):
                    raise
                await self._drop_session()  # the next call (or this one's retry) opens a new session
                if attempt == 2:
                    leaf = _leaf(e)
                    raise RuntimeError(
                        f"app {self.name!r} at {self.base_url} is not reachable "
                        f"({type(leaf).__name__}: {leaf}); is its server running?"
                    ) from None
            finally:
                self._pending.discard(answer)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def call_async(self, name: str, arguments: dict[str, Any], ctx: Ctx) -> Any:
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                result = await self._call_once(name, arguments, ctx)
        except TimeoutError:
            raise ToolError(f"app {self.name!r} did not answer {name!r} within {CALL_TIMEOUT:.0f}s") from None
        text = "".join(getattr(c, "text", "") for c in result.content)
        if result.is_error:
            raise ToolError(text or "the tool failed")
        try:
            return json_depth.loads(text)
        except json_depth.TooDeep:  # nested deeper than an agent may send: kept as the text it came as
            return text
        except ValueError:  # plain text; a string an MCP SDK also wraps as {"result": text} stays the string
            structured = result.structured_content
            return structured if structured is not None and structured != {"result": text} else text

    # -- data plane, over the protocol's JSON-RPC --

    async def _rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        if method not in self.operations:
            raise ToolError(
                f"app {self.name!r} is a plain MCP server: it has no data plane ({method})"
                if not self.data_plane
                else f"app {self.name!r} does not serve {method} (its card declares {', '.join(self.operations)})"
            )
        answer = (
            await self._http.post(
                RPC_PATH,
                timeout=DATA_TIMEOUT,
                json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}},
            )
        ).json()
        if "error" in answer:
            error = answer["error"]
            raise ToolError(f"{self.name}: {method} failed: {error['message']} {error.get('data') or ''}".strip())
        result: dict[str, Any] = answer["result"]
        return result

    async def reset(self) -> None:
        if METHOD_RESET in self.operations:  # (a server that declares none holds nothing to reset)
            await self._rpc(METHOD_RESET)

    async def load(self, data: dict[str, Any], *, key: str | None = None) -> None:
        part = DataPart(data=data, metadata={META_IDEMPOTENCY_KEY: key} if key else None)
        await self._rpc(METHOD_ADD, AddDataRequest(parts=[part]).model_dump(mode="json", exclude_none=True))

    async def export(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if METHOD_GET not in self.operations:
            return data  # nothing the framework can see or restore
        try:
            answer = GetDataResponse.model_validate(await self._rpc(METHOD_GET))
        except ValidationError as e:
            raise ToolError(f"{self.name}: {METHOD_GET} answered no protocol GetDataResponse: {str(e)[:500]}") from None
        for part in answer.parts:
            if isinstance(part, DataPart):  # (an export as a file is the app's own format, not one we read)
                data.update(part.data)
        return data

    async def export_to(self, grant: WriteNamespaceGrant) -> list[Part]:
        """data/get with a namespace grant (data-objects/v1), for an app whose card declares it and that the grant
        reaches (`exports_objects`); its answer's parts, naming what it uploaded under the grant's root."""
        params = {"write_namespace": grant.model_dump(mode="json", exclude_none=True)}
        try:
            return GetDataResponse.model_validate(await self._rpc(METHOD_GET, params)).parts
        except ValidationError as e:
            raise ToolError(f"{self.name}: {METHOD_GET} answered no protocol GetDataResponse: {str(e)[:500]}") from None

    async def close(self) -> None:
        await self._drop_session()
        await self._http.aclose()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def exports_objects(app: RemoteApp, grant_url: str) -> bool:
    """Whether `app` takes data/get's namespace grant (its card declares data-objects/v1) and the grant reaches it."""
    return (
        METHOD_GET in app.operations
        and DATA_OBJECTS_EXTENSION_URI in app.extensions
        and reaches(grant_url, app.base_url)
    )


async def _serve(
    client: Client,
    name: str,
    arguments: JsonObject,
    meta: RequestParamsMeta,
    answer: asyncio.Future[CallToolResult],
) -> None:
    """Make one queued call on the session; its result (or error) goes to `answer`."""
    try:
        result = await client.call_tool(name, arguments, meta=meta)
    except Exception as e:  # noqa: BLE001 - handed to the caller
        if not answer.done():
            answer.set_exception(e)
        return
    if not answer.done():
        answer.set_result(result)
