"""Where other packages plug into agent-env, and what is plugged in: each entry point, who provides it, whether it works.

Each loader (the step types' catalog, sandbox providers by name, store backends, apps) names the entry-point group it reads; this
module gathers them, so `agent-env plugin` shows every place a package can plug in. Inspecting loads every
plugin, catching whatever it raises: one broken package is reported with its error, never crashes the caller.
Only `agent-env plugin` imports this module: it sits above the loaders and imports them.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
from importlib.metadata import Distribution, EntryPoint, distributions, entry_points
from typing import Any, Literal

from pydantic import BaseModel

from agent_env import __version__
from agent_env.envs import App
from agent_env.envs.builtin import APPS
from agent_env.envs.builtin import ENTRY_POINT_GROUP as ENVS
from agent_env.providers.base import SandboxProvider
from agent_env.providers.by_name import BUILTIN as PROVIDER_BUILTINS
from agent_env.providers.by_name import ENTRY_POINT_GROUP as PROVIDERS
from agent_env.providers.topologies import BUILTIN as TOPOLOGY_BUILTINS
from agent_env.providers.topologies import ENTRY_POINT_GROUP as ENV_PROVIDERS
from agent_env.providers.topologies import EnvironmentProvider
from agent_env.step_types import BUILTINS as STEP_BUILTINS
from agent_env.step_types import ENTRY_POINT_GROUP as STEPS
from agent_env.step_types import StepType
from agent_env.stores.backends import CLOUD
from agent_env.stores.backends import ENTRY_POINT_GROUP as STORES

GROUPS = {
    STEPS: "step types: a function declared with agent_env.steps.step_type",
    PROVIDERS: "sandbox providers: a subclass of agent_env.providers.SandboxProvider",
    STORES: "store backends: a factory(kind, options, settings) returning a store",
    ENVS: "env types (apps by name): a subclass of agent_env.envs.App",
    ENV_PROVIDERS: "env topologies (where an env is served): a subclass of "
    "agent_env.providers.topologies.EnvironmentProvider",
}
SELF = "agentenv-framework"

Status = Literal["ok", "error", "needs extra", "ignored"]


class Plugin(BaseModel):
    """One name in one group: a built-in, or an entry point some distribution declares."""

    group: str
    name: str
    target: str  # module:attribute
    distribution: str
    version: str | None = None
    builtin: bool
    status: Status = "ok"
    error: str | None = None  # one line: what is wrong
    fix: str | None = None

    @property
    def broken(self) -> bool:
        """Something to fix (an optional extra not installed is a choice, not a fault)."""
        return self.status in ("error", "ignored")


def normalize(dist_name: str) -> str:
    """PEP 503: 'Agentenv_TestSteps' and 'agentenv-teststeps' are one distribution."""
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def builtins() -> dict[str, dict[str, str]]:
    """The names each group serves without any plugin, from the loaders' own tables."""
    return {
        STEPS: dict(STEP_BUILTINS),
        PROVIDERS: dict(PROVIDER_BUILTINS),
        STORES: {"local": "agent_env.stores.backends:open_store", **CLOUD},
        ENVS: dict(APPS),
        ENV_PROVIDERS: dict(TOPOLOGY_BUILTINS),
    }


def plugin_entry_points(dist: Distribution) -> list[EntryPoint]:
    """The entry points a distribution declares in agent-env's groups."""
    return [ep for ep in dist.entry_points if ep.group in GROUPS]


def find_distribution(name: str) -> Distribution | None:
    for dist in distributions():
        if normalize(dist.metadata["Name"] or "") == normalize(name):
            return dist
    return None


def inspect_all(load: bool = True) -> list[Plugin]:
    """Every built-in and every entry point in agent-env's groups, each loaded and checked when `load`."""
    plugins = []
    for group, table in builtins().items():
        for name, target in table.items():
            plugins.append(
                Plugin(group=group, name=name, target=target, distribution=SELF, version=__version__, builtin=True)
            )
    taken = {(p.group, p.name): p.distribution for p in plugins}
    for group in GROUPS:
        for ep in entry_points(group=group):
            dist = ep.dist
            plugin = Plugin(
                group=group,
                name=ep.name,
                target=ep.value,
                distribution=dist.metadata["Name"] if dist else "?",
                version=dist.version if dist else None,
                builtin=False,
            )
            if (group, ep.name) in taken:
                plugin.status, plugin.error = "ignored", f"{taken[group, ep.name]} already provides {ep.name!r}"
                plugin.fix = f"rename the entry point in {plugin.distribution}, or uninstall one of them"
            taken.setdefault((group, ep.name), plugin.distribution)
            plugins.append(plugin)
    plugins.sort(key=lambda p: list(GROUPS).index(p.group))  # stable: built-ins first within each group
    if load:
        for plugin in plugins:
            if plugin.status == "ok":
                check(plugin)
    return plugins


def check(plugin: Plugin) -> Plugin:
    """Load the plugin and hold it to what its group requires; sets its status, error and fix."""
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what a plugin prints on import must not corrupt --json
            obj = _load(plugin.target)
    except ModuleNotFoundError as e:
        missing = (e.name or "").split(".")[0]
        if plugin.builtin and missing != "agent_env":
            extra = plugin.target.split(":")[0].rsplit(".", 1)[-1]
            return _fail(
                plugin, "needs extra", f"{missing} is not installed", f"pip install 'agentenv-framework[{extra}]'"
            )
        return _fail(plugin, "error", _one_line(e), _fix_for(plugin))
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin may raise anything on import
        return _fail(plugin, "error", _one_line(e), _fix_for(plugin))
    problem = {
        STEPS: _step_problem,
        PROVIDERS: _provider_problem,
        STORES: _store_problem,
        ENVS: _app_problem,
        ENV_PROVIDERS: _topology_problem,
    }[plugin.group](plugin.name, obj)
    if problem:
        return _fail(plugin, "error", *problem)
    return plugin


def _load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _step_problem(name: str, obj: Any) -> tuple[str, str] | None:
    if not isinstance(obj, StepType):
        return (
            f"is a {type(obj).__name__}, not a step type",
            "point the entry point at a function decorated with @agent_env.steps.step_type",
        )
    if obj.name != name:
        return (
            f"declares the step type {obj.name!r} under the name {name!r}",
            "use the same name in the entry point and in @step_type",
        )
    try:
        obj.config.model_json_schema()
    except Exception as e:  # noqa: BLE001 - pydantic raises several kinds for types it cannot describe
        return (
            f"its config model {obj.config.__name__} has no JSON Schema ({_one_line(e)})",
            "use field types pydantic can describe (task files are validated and documented from the schema)",
        )
    if obj.config.model_config.get("extra") != "forbid":
        return (
            f"its config model {obj.config.__name__} accepts unknown fields (typos would pass)",
            "derive it from agent_env.steps.StepConfig",
        )
    unknown_refs = [f for f in obj.step_refs if f not in obj.config.model_fields]
    if unknown_refs:
        return (
            f"step_refs names fields its config does not have: {', '.join(unknown_refs)}",
            "list config fields that hold an upstream step's id",
        )
    if obj.in_workflow and obj.verb is None:
        return ("applied in the workflow (in_workflow) but declares no verb", "pass verb= to @step_type")
    return None


def _provider_problem(name: str, obj: Any) -> tuple[str, str] | None:
    if isinstance(obj, type) and issubclass(obj, SandboxProvider):
        return None
    return (
        f"is {_kind(obj)}, not a SandboxProvider subclass",
        "point the entry point at a class deriving from agent_env.providers.SandboxProvider",
    )


def _app_problem(name: str, obj: Any) -> tuple[str, str] | None:
    if not (isinstance(obj, type) and issubclass(obj, App)):
        return (
            f"is {_kind(obj)}, not an App subclass",
            "point the entry point at a class deriving from agent_env.envs.App",
        )
    if vars(obj).get("name") != name:
        return (
            f"the app {obj.__name__} is named {vars(obj).get('name')!r}, not {name!r}",
            "use the same name in the entry point and in the class's `name`",
        )
    return None


def _topology_problem(name: str, obj: Any) -> tuple[str, str] | None:
    if not (isinstance(obj, type) and issubclass(obj, EnvironmentProvider)):
        return (
            f"is {_kind(obj)}, not an EnvironmentProvider subclass",
            "point the entry point at a class deriving from agent_env.providers.topologies.EnvironmentProvider",
        )
    if getattr(obj, "type", None) != name:
        return (
            f"the topology {obj.__name__} has type {getattr(obj, 'type', None)!r}, not {name!r}",
            "use the same name in the entry point and in the class's `type`",
        )
    if missing := sorted(getattr(obj, "__abstractmethods__", ())):
        return (f"the topology {obj.__name__} leaves {', '.join(missing)} unimplemented", "implement start and stop")
    return None


def _store_problem(name: str, obj: Any) -> tuple[str, str] | None:
    if callable(obj):
        return None
    return (f"is {_kind(obj)}, not a factory", "point the entry point at a function factory(kind, options, settings)")


def _kind(obj: Any) -> str:
    return f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"


def _fail(plugin: Plugin, status: Status, error: str, fix: str) -> Plugin:
    plugin.status, plugin.error, plugin.fix = status, error, fix
    return plugin


def _fix_for(plugin: Plugin) -> str:
    if plugin.builtin:
        return "reinstall agentenv-framework"
    return f"fix or upgrade {plugin.distribution}, or remove it: agent-env plugin remove {plugin.distribution}"


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
