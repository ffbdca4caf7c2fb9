"""Storage budgets: what one instance may keep on the gateway's disk, and the free space the gateway keeps.

An agent is an adversary, and every call that writes leaves bytes behind: in its apps' data (their SQLite
files, and whatever an app in a process of its own writes in its folder) and in its trajectory. Unbounded,
one agent fills the disk every instance shares. So each instance has two budgets and the gateway a floor:

- app data (`[gateway] max_app_data_mib`): past it, the instance's calls that write (tools not marked
  read-only, data loads, restores) are refused; its reads keep working.
- trajectory (`[gateway] max_trajectory_mib`): every call adds an entry, refused ones too, so past it every
  tool call of the instance is refused (and not recorded): a call that cannot be recorded does not happen.
- free space (`[gateway] min_free_disk_mib`): below it, every instance's writes are refused and /ready says
  low disk, whatever the budgets.

A refusal is 507 Insufficient Storage (as for a quota) naming the budget and the setting that raises it.
Checking is cheap on the hot path: an instance's folder is measured (a walk of its few files) at most every
MEASURE_EVERY_CALLS calls or MEASURE_EVERY_S seconds; in between, what the calls it admitted carry is added
to the last measure, so a flood is stopped within the calls it has in flight, not a measuring period later.
What lands past a budget is those calls and, as SQLite checkpoints, at most one write-ahead log per file
(its auto-checkpoint size, ~4 MiB) that was already counted as written.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_env.gateway.trajectory import MAX_FIELD_BYTES

log = logging.getLogger("agent_env.gateway")
MIB = 1024 * 1024
MEASURE_EVERY_CALLS = 16  # an instance's folder is walked again after this many calls ...
MEASURE_EVERY_S = 1.0  # ... or this long, whichever comes first
RECHECK_AFTER_S = 0.05  # an estimate past a budget is measured again (it may overcount) at most this often
FREE_SPACE_EVERY_S = 0.1  # how long a reading of the disk's free space is trusted
ENTRY_BYTES = 512  # what a trajectory entry adds besides its arguments (names, times, a short result)
TRAJECTORY = "trajectory.sqlite"  # its files (with -wal, -shm) are the trajectory's; the rest is app data


@dataclass(frozen=True)
class StorageLimits:
    """Bytes an instance's app data and trajectory may reach, and the free space the disk keeps (0: no limit)."""

    app_data: int = 0
    trajectory: int = 0
    min_free: int = 0

    @classmethod
    def mib(cls, app_data: int, trajectory: int, min_free: int) -> StorageLimits:
        return cls(app_data * MIB, trajectory * MIB, min_free * MIB)


class InstanceUsage:
    """What one open instance keeps on disk: its last measure plus what the calls admitted since carry."""

    __slots__ = (
        "folder",
        "app_data",
        "trajectory",
        "pending_app",
        "pending_trajectory",
        "calls",
        "measured_at",
        "logged",
    )

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.app_data = self.trajectory = 0  # bytes, as last measured
        self.pending_app = self.pending_trajectory = 0  # estimated bytes admitted since
        self.calls = 0  # calls admitted since
        self.measured_at = -math.inf
        self.logged: set[str] = set()  # the budgets it was refused at, logged once each while it is open

    @property
    def app_estimate(self) -> int:
        return self.app_data + self.pending_app

    @property
    def trajectory_estimate(self) -> int:
        return self.trajectory + self.pending_trajectory

    def measure(self) -> None:
        app_data = trajectory = 0
        top = str(self.folder)
        for folder, name, size in _files(top):
            if folder == top and name.startswith(TRAJECTORY):
                trajectory += size
            else:
                app_data += size
        self.app_data, self.trajectory = app_data, trajectory
        self.pending_app = self.pending_trajectory = self.calls = 0
        self.measured_at = time.monotonic()

    def refresh(self, *, over: bool) -> None:
        """Measure again when the last measure is old, or when the estimate says over (it may overcount)."""
        age = time.monotonic() - self.measured_at
        if age >= MEASURE_EVERY_S or self.calls >= MEASURE_EVERY_CALLS or (over and age >= RECHECK_AFTER_S):
            self.measure()


def _files(top: str) -> Iterator[tuple[str, str, int]]:
    """(folder, name, size) of every file under `top` (an instance's folder: a few SQLite files, an app's log)."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # gone meanwhile (deleted), or not made yet
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield folder, entry.name, entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue


class DiskFloor:
    """The free space on the gateway's disk, read (a statvfs) at most every FREE_SPACE_EVERY_S."""

    def __init__(self, root: Path, min_free: int) -> None:
        self.root, self.min_free = root, min_free
        self._free, self._read_at = 0, -math.inf
        self._logged = False  # that the disk went below the floor (again once it was above)

    def free(self, *, fresh: bool = False) -> int:
        now = time.monotonic()
        if fresh or now - self._read_at >= FREE_SPACE_EVERY_S:
            self._free, self._read_at = shutil.disk_usage(self.root).free, now
        return self._free

    def low(self, *, fresh: bool = False) -> str | None:
        """None while the disk has the free space the gateway keeps; else what is wrong and what to do."""
        if not self.min_free:
            return None
        free = self.free(fresh=fresh)
        if free >= self.min_free:
            self._logged = False
            return None
        low = (
            f"the gateway's disk has {free / MIB:.0f} MiB free, below the floor of {self.min_free / MIB:.0f} MiB "
            "([gateway] min_free_disk_mib, AGENT_ENV_GATEWAY_MIN_FREE_DISK_MIB): writes are refused until space "
            "is freed or the floor is lowered"
        )
        if not self._logged:
            self._logged = True
            log.error("%s", low)
        return low


class Storage:
    """The gateway's budgets: `admit` before a tool call, `admit_load` before data is loaded or restored,
    `admit_new` before an instance is made. Each returns None, or the refusal's message."""

    def __init__(self, root: Path, limits: StorageLimits) -> None:
        self.limits = limits
        self.floor = DiskFloor(root, limits.min_free)

    def admit(self, usage: InstanceUsage, instance: str, *, writes: bool, arguments: Any) -> str | None:
        """A tool call (`writes`: to the apps' data; every call writes the trajectory); its estimate is counted."""
        usage.refresh(over=self._past(usage, writes=writes) is not None)
        if past := self._past(usage, writes=writes):
            what, used, cap, key = past
            refused = "tool calls are refused" if what == "trajectory" else "calls that write are refused"
            return _refusal(usage, instance, what, used, cap, key, refused)
        if writes and (low := self.floor.low()):
            return low
        if writes:
            size = approx_bytes(arguments)
            usage.pending_app += size
        else:
            size = approx_bytes(arguments, stop=MAX_FIELD_BYTES)
        usage.pending_trajectory += ENTRY_BYTES + min(size, MAX_FIELD_BYTES)  # the trajectory clips arguments
        usage.calls += 1
        return None

    def admit_load(self, usage: InstanceUsage, instance: str, size: int, *, replaces: bool = False) -> str | None:
        """Data of `size` bytes loaded into the instance's apps, or (`replaces`) a snapshot restored over them."""
        usage.measure()  # loads are rare: measure exactly
        cap, key = self.limits.app_data, "max_app_data_mib"
        if cap and replaces and size > cap:
            return _refusal(usage, instance, "app data", size, cap, key, "a snapshot this large is refused")
        if cap and not replaces and usage.app_data >= cap:
            return _refusal(usage, instance, "app data", usage.app_data, cap, key, "loads are refused")
        if low := self.floor.low(fresh=True):
            return low
        usage.pending_app += size
        return None

    def admit_new(self) -> str | None:
        """A new instance (or a fork) about to be written."""
        return self.floor.low(fresh=True)

    def _past(self, usage: InstanceUsage, *, writes: bool) -> tuple[str, int, int, str] | None:
        """(what, bytes used, budget, its setting) of the budget the call would go past, if any."""
        cap = self.limits.trajectory
        if cap and usage.trajectory_estimate >= cap:
            return "trajectory", usage.trajectory_estimate, cap, "max_trajectory_mib"
        cap = self.limits.app_data
        if writes and cap and usage.app_estimate >= cap:
            return "app data", usage.app_estimate, cap, "max_app_data_mib"
        return None


def _refusal(usage: InstanceUsage, instance: str, what: str, used: int, cap: int, key: str, refused: str) -> str:
    """What the caller is told; logged the first time the open instance meets that budget (not per call)."""
    message = (
        f"instance {instance!r} is at its {what} budget ({used / MIB:.1f} MiB of {cap / MIB:.0f} MiB, [gateway] "
        f"{key}): {refused}; raise {key} in the [gateway] section of .agentenv/config.toml (or "
        f"AGENT_ENV_GATEWAY_{key.upper()}) and restart the gateway, or start a new instance"
    )
    if key not in usage.logged:
        usage.logged.add(key)
        log.warning("%s", message)
    return message


def approx_bytes(value: Any, stop: int = 1 << 62) -> int:
    """About how many bytes `value` takes as JSON (its strings' lengths plus a few bytes per item), counted up
    to `stop`: an estimate between two measures needs to be close, not exact."""
    total, stack = 0, [value]
    while stack and total < stop:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 3
        elif isinstance(item, dict):
            total += 2
            stack += item
            stack += item.values()
        elif isinstance(item, list):
            total += 2
            stack += item
        else:
            total += 8
    return total
