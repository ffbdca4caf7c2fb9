"""The AgentEnv Framework's trigger format (urn:agentenv:triggers/v1, as a `register_env_triggers` step writes its
triggers in a framework task) read into our TriggerSpec data: one more reader of the same rules, not a second
engine. The run's workflow applies the result as it applies any trigger (agent_env.workflows.world_rules).

What it maps (framework -> ours):

- conditions: `action` (a tool call: `tool`, `where`, `roles`, `repeat`, `barrier`) -> `tool_call`; `time` (`at` an
  RFC 3339 time or an ISO 8601 duration from the clock's start, `after` + `offset`, a fixed `every`, or a random
  `{dist: exp, mean}` one with the trigger's `seed`, with `count` or `until`, `unless`) -> `time`; `state` with a
  `check` (`tool`, `args`, a dot-path `extract`, a `predicate`) -> `state`; a multi-step check's earlier reads
  (each may `bind` its value, which later `args` use as `${name}`, and test it) -> the condition's `before`. A predicate's `regex`/`equals`/`exists` -> `matches`/`equals`/`truthy`; a `where` key
  `args.X`, `result.X` or a bare argument name -> `arguments.X` / `result.X`; `[n]` -> `.n`.
- actions: `tool` (`args`, `as`) -> `call_tool` (`arguments`, `role`); `nl` -> `instruct`, carried out by the
  deploy_agent step that plays its executor (`executor`, else the step's `executor_agent_name`: a deploy_agent
  step's id or its agent's name there), within `executor_timeout_seconds`; `permission` (`enable`/`disable` tools,
  or `*`, of a role) -> `set_tools`; `delay` (an ISO 8601 duration, or a random `{dist: exp, mean, seed}`) -> `delay`.
- random waits: each draw is a pure function of the framework's seed, the trigger and the draw's number
  (agent_env.workflows.world_rules), so a replay of the run, and every run of the task, waits the same, as the
  framework's seeded draws repeat run to run (the numbers themselves differ from the framework's generator's).
- `${args.X}` / `${result.X}` in a tool action's args -> `${match.arguments.X}` / `${match.result.X}`; an optional
  `${args.X?}` -> `${match.arguments.X?}`, which finding nothing (or null) drops its key or list element, or is empty
  inside text, as the framework does (agent_env.spec.templates); any other `${...}` stays literal text, as the
  framework leaves it (and nl instructions are never templated).
- the step's `watch_roles` -> the roles of its action triggers (and of a deadline's `unless`) that name none.

What it refuses, naming the trigger's index and field: `website` conditions (our gateway proxies no websites),
a check's `{path, match, take}` extract, `verify`, a repeating time trigger with no end (`count` or `until`: ours
must let the run end), and any field the framework does not define.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta

from pydantic import TypeAdapter, ValidationError

FRAMEWORK_WHEN = ("action", "website")
FRAMEWORK_ACTIONS = ("nl", "tool", "permission")
# The step-level fields this reader consumes (the rest of the step's config stays the step's).
STEP_FIELDS = ("watch_roles", "executor_agent_name", "executor_timeout_seconds")
_PLACEHOLDER = re.compile(r"\$\{([^{}]*)\}")
_SEGMENT = re.compile(r"^(\w+)((?:\[(?:\d+|\*)\])*)$")
_DURATION: TypeAdapter[timedelta] = TypeAdapter(timedelta)
MAX_CHECK_STEPS = 9  # a state condition's own read and the reads before it (agent_env.spec.world MAX_STATE_READS)

Json = Mapping[str, object]


class FrameworkTriggerError(ValueError):
    """A framework trigger this reader cannot take: `where` is `triggers[i].field`."""

    def __init__(self, where: str, problem: str, fix: str) -> None:
        super().__init__(f"{where}: {problem} — {fix}")
        self.where, self.text = where, f"{problem} — {fix}"

    @property
    def loc(self) -> tuple[str | int, ...]:
        """`triggers[0].when.tool` as ("triggers", 0, "when", "tool")."""
        return tuple(int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", self.where))


class Executor:
    """The deploy_agent step that plays an executor: its id (`by`) and its agent's name in the env (`agent`)."""

    def __init__(self, step: str, agent: str) -> None:
        self.step, self.agent = step, agent


class TriggerContext:
    """What a register_env_triggers step gives its framework triggers: the deploy_env step of its `env_id`, its
    watched roles and the executors its nl actions may name."""

    def __init__(
        self,
        env: str,
        watch_roles: list[str] | None,
        executors: Mapping[str, Executor],
        default_executor: str | None,
        timeout_s: float | None,
    ) -> None:
        self.env, self.watch_roles, self.executors = env, watch_roles, executors
        self.default_executor, self.timeout_s = default_executor, timeout_s


def is_framework(trigger: object) -> bool:
    """Whether a trigger written in full is in the framework's format (its condition or an action says so)."""
    if not isinstance(trigger, Mapping):
        return False
    when = trigger.get("when")
    if isinstance(when, Mapping) and (when.get("type") in FRAMEWORK_WHEN or "check" in when or "offset" in when):
        return True
    actions = trigger.get("actions")
    return isinstance(actions, list) and any(
        isinstance(a, Mapping) and a.get("type") in FRAMEWORK_ACTIONS for a in actions
    )


def translate(trigger: Json, index: int, step_id: str, ctx: TriggerContext) -> dict[str, object]:
    """One framework trigger as our TriggerSpec data; FrameworkTriggerError naming `triggers[index].field`."""
    at = f"triggers[{index}]"
    _known(trigger, ("id", "description", "when", "actions", "barrier"), at)
    tid = trigger.get("id", f"{step_id}_{index}")
    if not isinstance(tid, str) or not tid:
        raise FrameworkTriggerError(f"{at}.id", f"must be a non-empty string, not {tid!r}", "name the trigger")
    when = _object(trigger.get("when"), f"{at}.when")
    kind = when.get("type")
    repeat = when.get("repeat", False)
    if kind == "action":
        ours = _action_when(when, at, ctx, trigger.get("barrier"))
    elif kind == "time":
        ours = _time_when(when, at, ctx)
    elif kind == "state":
        ours = _state_when(when, at, ctx)
    elif kind == "website":
        raise FrameworkTriggerError(
            f"{at}.when.type",
            "'website' triggers watch requests to an env's websites, which our gateway does not proxy",
            "watch the tool call the site makes instead (when.type 'action')",
        )
    else:
        raise FrameworkTriggerError(
            f"{at}.when.type", f"must be 'action', 'time' or 'state', not {kind!r}", "choose one of those"
        )
    if "barrier" in trigger and kind != "action":
        raise FrameworkTriggerError(f"{at}.barrier", "only an action trigger has a call to hold", "remove it")
    if not isinstance(repeat, bool):
        raise FrameworkTriggerError(f"{at}.when.repeat", f"must be true or false, not {repeat!r}", "write a boolean")
    actions = trigger.get("actions")
    if not isinstance(actions, list) or not actions:
        raise FrameworkTriggerError(f"{at}.actions", "must be a non-empty list", "give the trigger its actions")
    out: dict[str, object] = {
        "id": tid,
        "when": ours,
        "actions": [_action(a, f"{at}.actions[{j}]", ctx) for j, a in enumerate(actions)],
    }
    if repeat:
        out["repeat"] = True
    if isinstance(trigger.get("description"), str):
        out["description"] = trigger["description"]
    return out


# -- conditions --


def _action_when(when: Json, at: str, ctx: TriggerContext, barrier: object) -> dict[str, object]:
    _known(when, ("type", "tool", "where", "roles", "repeat"), f"{at}.when")
    out: dict[str, object] = {
        "type": "tool_call",
        "env": ctx.env,
        "tool": _text(when.get("tool"), f"{at}.when.tool"),
        "where": _where(when.get("where"), f"{at}.when.where"),
    }
    roles = _roles(when.get("roles"), f"{at}.when.roles")
    if roles is None:
        roles = ctx.watch_roles
    if roles is not None:
        out["roles"] = roles
    if barrier is not None:
        held = _object(barrier, f"{at}.barrier")
        _known(held, ("at", "timeout_seconds"), f"{at}.barrier")
        if held.get("at") != "provoking_call":
            raise FrameworkTriggerError(f"{at}.barrier.at", "must be 'provoking_call'", "write that")
        timeout = held.get("timeout_seconds", 30.0)
        out["barrier"] = _positive(timeout, f"{at}.barrier.timeout_seconds")
    return out


def _time_when(when: Json, at: str, ctx: TriggerContext) -> dict[str, object]:
    _known(when, ("type", "at", "after", "offset", "every", "count", "until", "unless", "seed"), f"{at}.when")
    if "roles" in when:
        raise FrameworkTriggerError(f"{at}.when.roles", "a time trigger has no provoking call", "remove it")
    out: dict[str, object] = {"type": "time"}
    every = when.get("every")
    if "seed" in when and not isinstance(every, Mapping):
        raise FrameworkTriggerError(f"{at}.when.seed", "goes with a random `every`", "remove it")
    if "at" in when and "after" in when:
        raise FrameworkTriggerError(f"{at}.when", "give `at` or `after`, not both", "remove one")
    if "after" in when:
        out["after"] = _text(when["after"], f"{at}.when.after")
        out["delay"] = _iso_duration(when.get("offset"), f"{at}.when.offset")
    elif "offset" in when:
        raise FrameworkTriggerError(f"{at}.when.offset", "goes with `after`", "remove it or add `after`")
    elif "at" in when:
        out["at"] = _mark(when["at"], f"{at}.when.at")
    elif isinstance(every, Mapping):
        pass  # the first: one drawn interval from the clock's start, as ours does with `every` alone
    elif every is not None:
        out["at"] = f"+{_seconds(_iso_duration(every, f'{at}.when.every'))}s"  # the first: one interval in
    else:
        raise FrameworkTriggerError(f"{at}.when", "a time trigger needs `at`, `after` or `every`", "give one")
    if every is not None:
        if isinstance(every, Mapping):
            out["every"] = _exp(every, when.get("seed"), f"{at}.when.every", f"{at}.when.seed")
        else:
            out["every"] = _iso_duration(every, f"{at}.when.every")
        if "count" not in when and "until" not in when:
            raise FrameworkTriggerError(
                f"{at}.when.every",
                "a repeating trigger with neither `count` nor `until` never ends, and here a run ends",
                "add `count` or `until`",
            )
    elif "count" in when or "until" in when:
        raise FrameworkTriggerError(f"{at}.when", "`count` and `until` need `every`", "add `every` or remove them")
    if "count" in when:
        out["count"] = when["count"]
    if "until" in when:
        out["until"] = _mark(when["until"], f"{at}.when.until")
    if "unless" in when:
        out["unless"] = _unless(when["unless"], f"{at}.when.unless", ctx)
    return out


def _unless(raw: object, at: str, ctx: TriggerContext) -> dict[str, object]:
    unless = _object(raw, at)
    _known(unless, ("tool", "where", "roles"), at)
    out: dict[str, object] = {
        "env": ctx.env,
        "tool": _text(unless.get("tool"), f"{at}.tool"),
        "where": _where(unless.get("where"), f"{at}.where"),
    }
    roles = _roles(unless.get("roles"), f"{at}.roles")
    if roles is None:
        roles = ctx.watch_roles
    if roles is not None:
        out["roles"] = roles
    return out


def _state_when(when: Json, at: str, ctx: TriggerContext) -> dict[str, object]:
    _known(when, ("type", "check", "roles"), f"{at}.when")
    check = _object(when.get("check"), f"{at}.when.check")
    steps = check.get("steps", [check] if "tool" in check else None)
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_CHECK_STEPS:
        raise FrameworkTriggerError(
            f"{at}.when.check.steps",
            f"must be a list of 1 to {MAX_CHECK_STEPS} reads",
            "read the value with tools and test it with the last one's predicate",
        )
    base = f"{at}.when.check" + (".steps" if "steps" in check else "")
    bound: set[str] = set()
    reads = []
    for i, raw in enumerate(steps):
        where = f"{base}[{i}]" if "steps" in check else base
        last = i == len(steps) - 1
        reads.append(_check_step(_object(raw, where), where, bound, last))
    *before, own = reads
    out = {"type": "state", "env": ctx.env, **own}
    if before:
        out["before"] = before
    return out


def _check_step(step: Json, where: str, bound: set[str], last: bool) -> dict[str, object]:
    """One read of a check: its tool, `${binding}` arguments, dot-path `extract`, `bind` and `predicate`."""
    _known(step, ("tool", "args", "extract", "predicate") + (() if last else ("bind",)), where)
    extract = step.get("extract")
    if extract is not None and not isinstance(extract, str):
        raise FrameworkTriggerError(
            f"{where}.extract", "only a dot path is taken here, not a {path, match, take} search", "give a dot path"
        )
    args = step.get("args", {})
    if not isinstance(args, Mapping):
        raise FrameworkTriggerError(f"{where}.args", "must be an object", "give the tool's arguments")
    if last and "predicate" not in step:
        raise FrameworkTriggerError(f"{where}.predicate", "is missing", "say what the value must be")
    out: dict[str, object] = {
        "tool": _text(step.get("tool"), f"{where}.tool"),
        "arguments": _bound(args, f"{where}.args", bound),
        "path": _path(extract, f"{where}.extract") if extract else "",
    }
    if "predicate" in step:
        out.update(_predicate(step["predicate"], f"{where}.predicate"))
    if step.get("bind") is not None:
        name = _text(step["bind"], f"{where}.bind")
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise FrameworkTriggerError(f"{where}.bind", f"{name!r} is not a name", "use letters, digits and _")
        out["bind"] = name
        bound.add(name)
    return out


def _bound(value: object, at: str, bound: set[str]) -> object:
    """A check read's args: `${name}` reads what an earlier read bound; nothing else is a placeholder there."""
    if isinstance(value, Mapping):
        return {k: _bound(v, f"{at}.{k}", bound) for k, v in value.items()}
    if isinstance(value, list):
        return [_bound(v, f"{at}[{i}]", bound) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if name not in bound:
            raise FrameworkTriggerError(
                at,
                f"{match.group(0)!r} is no binding an earlier read of the check makes (a state condition has no "
                "provoking call for args./result.)",
                "bind the value in an earlier step (`bind`)",
            )
        return "${" + name + "}"

    return _PLACEHOLDER.sub(one, value)


# -- actions --


def _action(raw: object, at: str, ctx: TriggerContext) -> dict[str, object]:
    action = _object(raw, at)
    kind = action.get("type")
    if "verify" in action:
        raise FrameworkTriggerError(
            f"{at}.verify",
            "an action's own acceptance check is not taken here",
            "check the outcome in a later step (check_state, or env_outcome_verifier)",
        )
    out: dict[str, object]
    if kind == "tool":
        _known(action, ("type", "tool", "args", "as", "delay"), at)
        args = _object(action.get("args", {}), f"{at}.args")
        out = {
            "type": "call_tool",
            "env": ctx.env,
            "tool": _text(action.get("tool"), f"{at}.tool"),
            "arguments": _templated(args, f"{at}.args"),
        }
        if action.get("as") is not None:
            out["role"] = _text(action["as"], f"{at}.as").strip()
    elif kind == "nl":
        _known(action, ("type", "instruction", "executor", "delay"), at)
        named = action.get("executor", ctx.default_executor)
        if named is None:
            raise FrameworkTriggerError(
                f"{at}.executor",
                "an nl action needs an executor agent to carry it out",
                "give the step `executor_agent_name` or the action `executor` (a deploy_agent step or its agent)",
            )
        executor = ctx.executors.get(str(named))
        if executor is None:
            known = ", ".join(sorted(ctx.executors)) or "none"
            raise FrameworkTriggerError(
                f"{at}.executor" if "executor" in action else "executor_agent_name",
                f"{named!r} is no agent a deploy_agent step of this task deploys (known: {known})",
                "deploy the agent that plays it with a deploy_agent step (its id or `as` is its name)",
            )
        out = {
            "type": "instruct",
            "env": ctx.env,
            "agent": executor.agent,
            "by": executor.step,
            "instruction": _text(action.get("instruction"), f"{at}.instruction").replace("${", "$${"),
        }
        if ctx.timeout_s is not None:
            out["timeout"] = ctx.timeout_s
    elif kind == "permission":
        _known(action, ("type", "action", "role", "tools", "delay"), at)
        change = action.get("action")
        if change not in ("enable", "disable"):
            raise FrameworkTriggerError(f"{at}.action", f"must be 'enable' or 'disable', not {change!r}", "choose")
        tools = action.get("tools")
        if tools == "*":
            tools = ["*"]
        if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
            raise FrameworkTriggerError(f"{at}.tools", "must be a list of tool names or '*'", "list the tools")
        out = {"type": "set_tools", "env": ctx.env, "role": _text(action.get("role"), f"{at}.role"), change: tools}
    else:
        raise FrameworkTriggerError(f"{at}.type", f"must be 'tool', 'nl' or 'permission', not {kind!r}", "choose one")
    delay = action.get("delay")
    if isinstance(delay, Mapping):
        out["delay"] = _exp(delay, delay.get("seed"), f"{at}.delay", f"{at}.delay.seed")
    elif delay is not None:
        out["delay"] = _iso_duration(delay, f"{at}.delay")
    return out


# -- values --


def _known(value: Json, fields: Sequence[str], at: str) -> None:
    extra = [k for k in value if k not in fields]
    if extra:
        raise FrameworkTriggerError(
            f"{at}.{extra[0]}", "is not a field of the framework's trigger format here", f"use {', '.join(fields)}"
        )


def _object(value: object, at: str) -> Json:
    if not isinstance(value, Mapping):
        raise FrameworkTriggerError(at, f"must be an object, not {type(value).__name__}", "write it as {...}")
    return value


def _text(value: object, at: str) -> str:
    if not isinstance(value, str) or not value:
        raise FrameworkTriggerError(at, f"must be a non-empty string, not {value!r}", "name it")
    return value


def _roles(value: object, at: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(r, str) and r for r in value):
        raise FrameworkTriggerError(at, "must be a non-empty list of role names", "list the roles")
    return list(value)


def _positive(value: object, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 86_400:
        raise FrameworkTriggerError(at, f"must be a positive number of seconds, not {value!r}", "give one")
    return float(value)


def _iso_duration(value: object, at: str) -> timedelta:
    if not isinstance(value, str) or not value.startswith("P"):
        raise FrameworkTriggerError(at, f"must be an ISO 8601 duration, not {value!r}", "write e.g. 'PT30M'")
    try:
        delta = _DURATION.validate_python(value)
    except ValidationError:
        raise FrameworkTriggerError(at, f"{value!r} is not an ISO 8601 duration", "write e.g. 'PT30M'") from None
    if delta <= timedelta(0):
        raise FrameworkTriggerError(at, "must be a positive duration", "write e.g. 'PT30M'")
    return delta


def _exp(dist: Json, seed: object, at: str, seed_at: str) -> dict[str, object]:
    """`{dist: exp, mean}` and its integer seed (the framework requires one) as our exponential interval."""
    _known(dist, ("dist", "mean", "seed") if seed_at.endswith("delay.seed") else ("dist", "mean"), at)
    if dist.get("dist") != "exp":
        raise FrameworkTriggerError(f"{at}.dist", f"must be 'exp', not {dist.get('dist')!r}", "write 'exp'")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise FrameworkTriggerError(seed_at, f"a random wait needs an integer seed, not {seed!r}", "give one")
    return {"dist": "exp", "mean": _iso_duration(dist.get("mean"), f"{at}.mean"), "seed": seed}


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():g}"


def _mark(value: object, at: str) -> str:
    """A time: RFC 3339 as it is, an ISO 8601 duration as `+Ns` from the clock's start."""
    if isinstance(value, str) and value.startswith("P"):
        return f"+{_seconds(_iso_duration(value, at))}s"
    return _text(value, at)


def _path(path: str, at: str) -> str:
    """The framework's `a.b[0].c` (a trailing `[*]`: the list itself) as our `a.b.0.c`."""
    parts: list[str] = []
    for segment in path.split("."):
        match = _SEGMENT.match(segment)
        if match is None:
            raise FrameworkTriggerError(at, f"{path!r} is not a path (a.b[0].c)", "fix the path")
        parts.append(match.group(1))
        parts += [i for i in re.findall(r"\[(\d+|\*)\]", match.group(2)) if i != "*"]
    return ".".join(parts)


def _where_path(field: str, at: str) -> str:
    head, _, rest = field.partition(".")
    if head in ("args", "result") and rest:
        return ("arguments" if head == "args" else "result") + "." + _path(rest, at)
    return "arguments." + _path(field, at)


def _predicate(raw: object, at: str) -> dict[str, object]:
    pred = _object(raw, at)
    given = [k for k in ("regex", "equals", "exists") if k in pred]
    if len(given) != 1 or len(pred) != 1:
        raise FrameworkTriggerError(at, "needs exactly one of regex, equals or exists", "give one")
    if given == ["regex"]:
        return {"matches": _text(pred["regex"], f"{at}.regex")}
    if given == ["equals"]:
        return {"equals": pred["equals"]}
    if not isinstance(pred["exists"], bool):
        raise FrameworkTriggerError(f"{at}.exists", "must be true or false", "write a boolean")
    return {"truthy": pred["exists"]}


def _where(raw: object, at: str) -> list[dict[str, object]]:
    if raw is None:
        return []
    where = _object(raw, at)
    return [{"path": _where_path(k, f"{at}.{k}"), **_predicate(v, f"{at}.{k}")} for k, v in where.items()]


def _templated(value: object, at: str) -> object:
    """A tool action's args: `${args.X}` / `${result.X}` read the provoking call; any other `${...}` is text."""
    if isinstance(value, Mapping):
        return {k: _templated(v, f"{at}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_templated(v, f"{at}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        optional = "?" if name.endswith("?") else ""
        head, _, rest = name.rstrip("?").partition(".")
        if head not in ("args", "result"):
            return "$" + match.group(0)  # a check binding (none here) or prose: literal, as the framework leaves it
        root = "arguments" if head == "args" else "result"
        return "${match." + root + ("." + _path(rest, at) if rest else "") + optional + "}"

    return _PLACEHOLDER.sub(one, value)
