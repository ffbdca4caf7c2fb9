"""How the project writes a moment: ISO 8601 in UTC with a `Z` (what agents, records and the CLI show)."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime) -> str:
    """`moment` as ISO 8601; UTC is written `Z` (an aware time in another zone keeps its offset)."""
    return moment.isoformat().replace("+00:00", "Z")


def iso_or_none(moment: datetime | None) -> str | None:
    return iso(moment) if moment is not None else None


def utc_now_iso() -> str:
    """The real time now, as `iso` writes it."""
    return iso(datetime.now(UTC))
