"""The process that owns a running run, named so that another process can tell later whether it is still alive.

A pid alone cannot say so: once its process is gone the kernel hands the
number to another, and a run would look owned for ever. So an owner is
``BOOT:PID:START``: the kernel's boot id (``/proc/sys/kernel/random/boot_id``,
new at each boot, when start times begin again), the pid, and the process's
start time (field 22 of ``/proc/PID/stat``, clock ticks since boot). The
owner is alive while this boot's process with that pid has that start time.
Without ``/proc`` (not Linux) only the pid is recorded and asked after.
Processes on other machines (a database on a shared disk) cannot be asked
after at all: their runs are owned by another boot id and read as gone.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

PROC = Path("/proc")
BOOT_ID = PROC / "sys" / "kernel" / "random" / "boot_id"


def this_process() -> str | None:
    """This process's owner name, or None where ``/proc`` cannot say it (then its pid alone is recorded)."""
    return _name(os.getpid())


@lru_cache(maxsize=1)
def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def _start_ticks(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat``; the command name (field 2) may hold spaces and parentheses, so the fields
    are counted from its closing one (field 3 is the first after it)."""
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields[22 - 3].decode() if len(fields) > 22 - 3 else None


def _name(pid: int) -> str | None:
    boot, start = _boot_id(), _start_ticks(pid)
    return f"{boot}:{pid}:{start}" if boot and start else None


def alive(pid: int | None, owner: str | None) -> bool:
    """Whether the process that recorded ``owner`` (or, for a run recorded without one, ``pid``) still runs."""
    if owner is not None:
        recorded_pid = owner.split(":")[1] if owner.count(":") == 2 else ""
        return recorded_pid.isdigit() and _name(int(recorded_pid)) == owner
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True
