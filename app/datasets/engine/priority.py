"""The priority of DuckDB worker processes (Linux): a worker's threads lowered by a niceness
(`set_nice`) and, where the server may undo it, put under SCHED_IDLE (`set_idle`, `may_raise`); the
callers whose calls ran long start their next calls lowered (`LongCallers`) and take no burst slot
(`slots.FairSlots`). Which CPUs a lowered worker may use is `app.core.cpus`'s."""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
import time
from typing import Protocol

from app.core.embeddings import cpus

# How long a caller whose call ran past `demote_after` has its next calls start at the lowered priority.
LOWERED_FOR_S = 10.0
# A call that ran this long makes its caller one that takes no burst slot for `LOWERED_FOR_S`: a short
# call that ran past `demote_after` on a busy host (a cold database, say) does not.
HEAVY_S = 2.0
CAP_SYS_NICE = 23  # its bit in /proc/<pid>/status's CapEff


def set_nice(pid: int, nice: int) -> bool:
    """Set the niceness of every thread of process `pid` (Linux keeps one per thread, and DuckDB's
    threads were started before any change). False when not allowed (raising a priority needs
    `CAP_SYS_NICE`) or not possible here; a thread that ended meanwhile is skipped."""
    return sys.platform.startswith("linux") and cpus.each_thread(
        pid, lambda tid: os.setpriority(os.PRIO_PROCESS, tid, nice)
    )


def set_idle(pid: int, idle: bool) -> bool:
    """Put every thread of process `pid` under SCHED_IDLE, or back under SCHED_OTHER. Lowering a
    niceness alone leaves a wait: a call's thread that wakes up may wait for a lowered thread's time
    slice to end (a few milliseconds, every time it wakes up); a running SCHED_IDLE thread gives way at
    once. False when not allowed (leaving SCHED_IDLE needs what raising a niceness needs) or not possible
    here."""
    policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
    return sys.platform.startswith("linux") and cpus.each_thread(
        pid, lambda tid: os.sched_setscheduler(tid, policy, os.sched_param(0))
    )


def may_raise(nice: int) -> bool:
    """True when this process may put a thread's niceness back to `nice` once lowered: with
    `CAP_SYS_NICE`, or within `RLIMIT_NICE` (which allows down to 20 minus its soft limit)."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:") and int(line.split()[1], 16) >> CAP_SYS_NICE & 1:
                return True
    limit = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return limit == resource.RLIM_INFINITY or 20 - limit <= nice


class Lowerable(Protocol):
    """A worker process as the priority rules see it (`process.WorkerProcess`)."""

    @property
    def demoted(self) -> bool: ...

    @property
    def long_call(self) -> bool: ...

    def lower(self) -> None: ...

    def promote(self) -> bool: ...


class LongCallers:
    """The callers whose latest long call, one that ran past `demote_after`, ended less than
    `LOWERED_FOR_S` ago. Their calls are long ones: the first `demote_after` seconds of each would
    otherwise compete with everyone's short calls, so their next calls start lowered. Those whose latest
    call of `HEAVY_S` or more ended as recently are `heavy`: they take no burst slot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Callers whose latest long call ended at this `time.monotonic()`.
        self._ended: dict[str, float] = {}
        # ... and those whose latest call of HEAVY_S or more did.
        self._heavy: dict[str, float] = {}

    def recent(self, caller: str) -> bool:
        """True when `caller`'s latest long call ended less than `LOWERED_FOR_S` ago."""
        since = self._ended.get(caller)
        return since is not None and time.monotonic() - since < LOWERED_FOR_S

    def heavy(self, caller: str) -> bool:
        """True when `caller`'s latest call of `HEAVY_S` or more ended less than `LOWERED_FOR_S` ago."""
        since = self._heavy.get(caller)
        return since is not None and time.monotonic() - since < LOWERED_FOR_S

    def fit(self, caller: str, worker: Lowerable) -> None:
        """Before a call: lower `worker` for a caller of long calls; put it back to its own priority for
        anyone else."""
        if self.recent(caller):
            if not worker.demoted:
                worker.lower()
        elif worker.demoted:
            worker.promote()

    def ended(self, caller: str, worker: Lowerable, seconds: float = 0.0) -> None:
        """After a call on `worker` that took `seconds`: remember its caller when the call ran long (see
        `fit`), or `HEAVY_S` or more (see `heavy`)."""
        marks = [m for m, hit in ((self._ended, worker.long_call), (self._heavy, seconds >= HEAVY_S)) if hit]
        if not marks:
            return
        now = time.monotonic()
        with self._lock:
            for mark in marks:
                mark[caller] = now
                for key in [k for k, t in mark.items() if now - t >= LOWERED_FOR_S]:
                    del mark[key]
