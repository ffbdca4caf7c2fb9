"""`Wire`: one JSON object of another program, typed as loosely as its owner keeps it.

The model APIs (OpenAI chat completions and Responses, Anthropic Messages: their messages, tools and blocks) and
the command-line agents (their config files and the events they print) define these shapes and change them between
versions; the code reading them checks the keys it uses where it uses them. Shapes that are ours (transcripts,
turns, trajectories) are TypedDicts or pydantic models beside the code that makes them, not this.
"""

from __future__ import annotations

from typing import Any

Wire = dict[str, Any]
