"""`verify_universe_load_export_roundtrip`: an env takes a universe (data for its apps) and gives it back.

Over the data plane: reset, `data/add` the universe, `data/get` (export 1); reset, `data/add` export 1 as it
came, `data/get` (export 2). Per app, the load must lose nothing (every value of the universe is in export 1)
and the round trip must be stable (export 2 is export 1). Values compare by meaning, not spelling: `"12.50"` is
12.5, timestamps compare as instants, and null, "", [] and {} are all empty. A value the universe left empty
and the env filled in (a default, a stamp) is no loss; a value the universe gave and the export lacks is.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, date, datetime
from typing import Any

from agentenv_protocol.types import METHOD_ADD, METHOD_GET, METHOD_RESET

from agent_env.envs.dataplane import META_APP
from agent_env.gateway_client.wire import JsonObject
from agent_env.validators import target as net
from agent_env.validators.env_protocol import offered
from agent_env.validators.report import Finding, ValidationReport

VALIDATOR = "verify_universe_load_export_roundtrip"
MAX_ISSUES = 8  # per app and comparison, in the report
EMPTY = "\x00empty"
FIX_CALLS = "make data/reset, data/add and data/get work, and data/add take what data/get gives"


class RoundTripFailed(Exception):
    """A data-plane call of the round trip failed (its finding says which)."""


def canon(value: Any) -> Any:
    """A value as compared: numbers (and numeric strings) as rounded floats, timestamps as UTC instants."""
    if value is None or value == "" or value == [] or value == {}:
        return EMPTY
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return round(float(value), 6)
    if isinstance(value, list):
        return [canon(v) for v in value]
    if isinstance(value, dict):
        return {k: canon(v) for k, v in value.items()}
    if isinstance(value, str):
        text = value.strip()
        try:
            return round(float(text), 6)
        except ValueError:
            pass
        return _instant(text) or text
    return value


def _instant(text: str) -> str | None:
    if len(text) == 10:
        try:
            return "date:" + date.fromisoformat(text).isoformat()
        except ValueError:
            return None
    if len(text) < 16 or not text[:4].isdigit():
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return "at:" + moment.isoformat()


def covers(exported: Any, given: Any) -> bool:
    """Whether `exported` holds everything `given` said (given empties are no promise)."""
    if given == EMPTY:
        return True
    if isinstance(given, dict):
        return isinstance(exported, dict) and all(covers(exported.get(k, EMPTY), v) for k, v in given.items())
    return bool(exported == given)


def _rows(table: Any) -> list[Any]:
    return table if isinstance(table, list) else [table]


def _key(row: Any) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def load_issues(given: JsonObject, exported: JsonObject) -> list[str]:
    """What of the universe's app data (tables of rows) the export does not hold."""
    issues = []
    for table, rows in given.items():
        have = [canon(r) for r in _rows(exported.get(table, []))]
        for n, row in enumerate(_rows(rows)):
            wanted = canon(row)
            match = next((i for i, h in enumerate(have) if covers(h, wanted)), None)
            if match is None:
                issues.append(f"{table}[{n}] is not in the export: {net.clip(_key(row), 120)}")
            else:
                have.pop(match)
    return issues


def stable_issues(first: JsonObject, second: JsonObject) -> list[str]:
    """Where a second export differs from the first (tables compared as multisets of rows)."""
    issues = []
    for table in sorted(set(first) | set(second)):
        a = Counter(_key(canon(r)) for r in _rows(first.get(table, [])))
        b = Counter(_key(canon(r)) for r in _rows(second.get(table, [])))
        if a != b:
            lost, gained = a - b, b - a
            said = []
            if lost:
                said.append(f"{sum(lost.values())} row(s) of export 1 missing")
            if gained:
                said.append(f"{sum(gained.values())} row(s) new")
            issues.append(f"{table}: {', '.join(said)} after reloading export 1")
    return issues


def by_app(parts: Any, apps: list[str]) -> dict[str, JsonObject]:
    """An export's data parts by app: named in their metadata, or wrapped as {app: data}, or the one app's."""
    out: dict[str, JsonObject] = {}
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict) or part.get("kind") != "data" or not isinstance(part.get("data"), dict):
            continue
        data = part["data"]
        app = (part.get("metadata") or {}).get(META_APP)
        if app is None and set(data) <= set(apps) and data:
            out.update({k: v for k, v in data.items() if isinstance(v, dict)})
            continue
        if app is None and len(apps) == 1:
            app = apps[0]
        if isinstance(app, str):
            out[app] = data
    return out


def exported_by_app(exported: JsonObject) -> dict[str, JsonObject]:
    """A data/get answer's data by app, as each part names its app (an env of our SDK or gateway names them)."""
    parts = exported.get("parts")
    named = [
        p["metadata"][META_APP]
        for p in (parts if isinstance(parts, list) else [])
        if isinstance(p, dict) and isinstance(p.get("metadata"), dict) and isinstance(p["metadata"].get(META_APP), str)
    ]
    return by_app(parts, sorted(set(named)))


def load_parts(card: Any, universe: JsonObject) -> list[JsonObject]:
    """The universe as data/add parts: a composed env (a card with children) takes {app: data} and routes it to
    its apps; an env of one app takes its own data, named by its metadata."""
    if isinstance(card, dict) and card.get("children_environments"):
        return [{"kind": "data", "data": {app: universe[app]}} for app in sorted(universe)]
    return [{"kind": "data", "data": universe[app], "metadata": {META_APP: app}} for app in sorted(universe)]


async def _call(http: Any, target: net.EnvTarget, method: str, params: Any, step: str) -> JsonObject:
    try:
        answer = await net.rpc(http, target, method, params)
    except net.Unreachable as e:
        raise RoundTripFailed(f"{step}: {e}") from None
    body = answer.body if isinstance(answer.body, dict) else {}
    if not isinstance(body.get("result"), dict):
        error = body.get("error") or net.clip(answer.text)
        raise RoundTripFailed(f"{step}: {method} answered {net.clip(json.dumps(error, default=str))}")
    result: JsonObject = body["result"]
    return result


async def round_trip(target: net.EnvTarget, card: Any, universe: JsonObject) -> tuple[ValidationReport, JsonObject]:
    """The report (per app: `universe.<app>.loads`, `universe.<app>.stable`) and the verdict as data."""
    report, verdict, _, _ = await round_trip_exported(target, card, universe)
    return report, verdict


async def round_trip_exported(
    target: net.EnvTarget, card: Any, universe: JsonObject
) -> tuple[ValidationReport, JsonObject, dict[str, JsonObject], dict[str, JsonObject]]:
    """`round_trip`, and exports 1 and 2 by app (what the env gave back of the universe, then of export 1; empty
    where it gave nothing)."""
    report = ValidationReport(validator=VALIDATOR, target=target.base)
    ops = offered(card)
    lacking = [m for m in (METHOD_ADD, METHOD_GET) if m not in ops]
    if lacking:
        report.checks.append(
            Finding.failed(
                "universe.operations",
                f"the card does not offer {', '.join(lacking)}: no round trip is possible",
                "serve data/add and data/get (and data/reset) and list them in capabilities.operations",
            )
        )
        return report, {"compatible": False, "environments": {}}, {}, {}
    apps = sorted(universe)
    parts = load_parts(card, universe)
    reset = METHOD_RESET in ops
    environments: JsonObject = {app: {"compatible": False} for app in apps}
    async with net.client() as http:
        try:
            if reset:
                await _call(http, target, METHOD_RESET, {}, "reset before loading")
            await _call(http, target, METHOD_ADD, {"parts": parts}, "loading the universe")
            export1 = await _call(http, target, METHOD_GET, {}, "export 1")
        except RoundTripFailed as e:
            report.checks.append(Finding.failed("universe.round_trip", str(e), FIX_CALLS))
            return report, {"compatible": False, "environments": environments, "error": str(e)}, {}, {}
        first = by_app(export1.get("parts"), apps)
        for app in apps:  # what the first load kept, decided before the reload (which a lossy export may break)
            lost = load_issues(universe[app], first.get(app, {})) if isinstance(universe[app], dict) else []
            report.checks.append(_finding(f"universe.{app}.loads", lost, "the export lacks what was loaded"))
            environments[app] = {"compatible": not lost, "load_issues": lost, "stability_issues": []}
        try:
            if reset:
                await _call(http, target, METHOD_RESET, {}, "reset before reloading")
            await _call(http, target, METHOD_ADD, {"parts": export1.get("parts") or []}, "reloading export 1")
            export2 = await _call(http, target, METHOD_GET, {}, "export 2")
        except RoundTripFailed as e:
            report.checks.append(Finding.failed("universe.round_trip", str(e), FIX_CALLS))
            return report, {"compatible": False, "environments": environments, "error": str(e)}, first, {}
    if not reset:
        report.checks.append(
            Finding.failed(
                "universe.reset",
                "the card does not offer data/reset: export 2 was loaded on top of export 1",
                "serve data/reset",
                required=False,
            )
        )
    second = by_app(export2.get("parts"), apps)
    for app in apps:
        moved = stable_issues(first.get(app, {}), second.get(app, {}))
        report.checks.append(_finding(f"universe.{app}.stable", moved, "reloading the export changed it"))
        environments[app]["stability_issues"] = moved
        environments[app]["compatible"] = environments[app]["compatible"] and not moved
    return report, {"compatible": report.passed, "environments": environments}, first, second


def _finding(name: str, issues: list[str], what: str) -> Finding:
    if not issues:
        return Finding.ok(name)
    more = f" (and {len(issues) - MAX_ISSUES} more)" if len(issues) > MAX_ISSUES else ""
    return Finding.failed(
        name,
        f"{what}: " + "; ".join(issues[:MAX_ISSUES]) + more,
        "export everything data/add takes, in a form data/add takes back unchanged",
    )
