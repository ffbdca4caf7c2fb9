"""`agent-env agents list|pending|answer`: the gateway's hosted agents, and the turns waiting for a person.

These only talk to a gateway that already runs: they never start the embedded one.
"""

from __future__ import annotations

import json

from agent_env.cli import aio
from agent_env.cli.output import console
from agent_env.config import load_settings
from agent_env.errors import BadInput, NotFound


def _connect():
    """A client of the configured gateway; a clear error when the embedded one is not running."""
    from agent_env.gateway import embedded
    from agent_env.gateway_client import GatewayUnavailable

    settings = load_settings()
    if not settings.gateway.urls() and not embedded.status(settings).running:
        raise GatewayUnavailable(
            "the embedded gateway is not running, so no agents are hosted and no turns wait",
            "start it with `agent-env gateway start` (runs that deploy agents start it too)",
        )
    return embedded.connect(settings, start_daemon=False)


def _one_line(text: str, limit: int = 100) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def list_command(json_out: bool) -> int:
    async def go() -> int:
        async with _connect() as client:
            agents = await client.list_agents()
        if json_out:
            print(json.dumps(agents, indent=2))
            return 0
        if not agents:
            console().print("no agents are hosted — runs deploy them (`deploy_agent` steps)")
            return 0
        from rich.markup import escape
        from rich.table import Table

        table = Table(box=None, pad_edge=False)
        for col in ("id", "name", "type", "role", "run", "models"):
            table.add_column(col, no_wrap=col != "models", overflow="fold")
        for a in agents:
            record = a.get("record", {})
            models = ", ".join(f"{p}: {m.get('model')}" for p, m in (a.get("models") or {}).items())
            table.add_row(
                escape(a["id"]),
                escape(record.get("name", "")),
                record.get("type", ""),
                escape(record.get("role") or ""),
                escape(a.get("run_id") or ""),
                escape(models),
            )
        console().print(table)
        return 0

    return aio.run(go())


def pending_command(json_out: bool) -> int:
    async def go() -> int:
        async with _connect() as client:
            turns = await client.human_turns()
        if json_out:
            print(json.dumps(turns, indent=2, ensure_ascii=False))
            return 0
        if not turns:
            console().print("no turns are waiting for a person")
            return 0
        from rich.markup import escape
        from rich.table import Table

        table = Table(box=None, pad_edge=False)
        for col in ("id", "agent", "asked_at", "prompt"):
            table.add_column(col, no_wrap=col != "prompt", overflow="fold")
        for t in sorted(turns, key=lambda t: t.get("asked_at", "")):
            table.add_row(
                escape(t["id"]),
                escape(t.get("agent", "")),
                t.get("asked_at", ""),
                escape(_one_line(t.get("prompt", ""), 200) + _under_review(t)),
            )
        console().print(table)
        console().print(
            f"{len(turns)} waiting — answer one with `agent-env agents answer ID TEXT` "
            "(ID may be a unique prefix, or the agent's name when it has one turn waiting); "
            "decide a review with `... answer ID COMMENT [--score 0..1] [--abort]` (`--json` shows all it holds)"
        )
        return 0

    return aio.run(go())


def _under_review(turn: dict) -> str:
    """A review's deadline and, a line each, the outputs it shows (an agent's answer where there is one)."""
    if turn.get("kind") != "review":
        return ""
    shown = [
        f"\n  {step}: " + _one_line(out.get("answer", json.dumps(out)) if isinstance(out, dict) else out, 300)
        for step, out in (turn.get("upstream") or {}).items()
    ]
    return f" (deadline {turn.get('deadline')})" + "".join(shown)


def _match(turns: list[dict], given: str) -> str:
    """The id of the waiting turn meant by `given`: its id, a unique prefix, or an agent with one turn
    (else `given` itself, for the gateway to say what became of it)."""
    for how in (
        lambda t: t["id"] == given,
        lambda t: t["id"].startswith(given),
        lambda t: given in (t.get("agent"), t.get("agent_id")),
    ):
        found = [t["id"] for t in turns if how(t)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise BadInput(
                f"{given!r} matches {len(found)} waiting turns: {', '.join(found)}", "give the whole turn id"
            )
    return given


def answer_command(turn_id: str, text: str, *, score: float | None = None, abort: bool = False) -> int:
    """Answer a turn; a review is decided: continue (or `abort`), with an optional score."""
    import getpass

    from agent_env.gateway_client import GatewayRefused

    if not text.strip():
        raise BadInput("the answer is empty", 'give the text to answer with: agent-env agents answer ID "..."')

    try:
        by: str | None = getpass.getuser()  # who decided, as a review records it
    except (KeyError, OSError):
        by = None

    async def go() -> int:
        async with _connect() as client:
            turns = await client.human_turns()
            chosen = _match(turns, turn_id)
            fix = ("waiting now: " + ", ".join(t["id"] for t in turns)) if turns else "no turn is waiting now"
            try:
                verdict = {"verdict": "abort" if abort else None, "score": score, "by": by}
                turn = await client.answer_human_turn(chosen, text, **verdict)
            except GatewayRefused as e:
                if e.status == 404:
                    raise NotFound(f"no turn {turn_id!r} is waiting for an answer", fix) from None
                if e.status in (400, 409):  # a verdict for an agent's turn; answered or expired already
                    raise BadInput(e.problem, fix) from None
                raise
        if turn.get("kind") == "review":
            scored = f" (score {turn['score']:g})" if turn.get("score") is not None else ""
            console().print(f"decided review [bold]{turn['id']}[/]: {turn['verdict']}{scored}")
        else:
            console().print(f"answered turn [bold]{turn['id']}[/] of {turn.get('agent', '?')}")
        return 0

    return aio.run(go())
