"""The CPUs background work may use: all of this process's but one, so that one core stays free for the
calls being answered.

A lower priority alone does not keep background work out of their way on a small host. With every core
running lowered work (the embedding queue's batches on one, another key's long query on the other),
each wake-up of a call being answered first displaces that work; with both kinds of lowered work kept
to one core, another key's calls were markedly faster under the same load (scripts/bench_hostile.py,
docs/benchmarks.md).

The embedding queue's background thread is always confined (it is one thread: an idle host loses
nothing). A feature may confine its own long calls while other calls are being answered (the calls in
flight of `app.core.embeddings.load.LOAD`, counted by the executor), so that a long call alone on the
host keeps every core.

Only Linux sets the CPUs of one thread (`sched_setaffinity` with a thread id); elsewhere nothing is
confined. Unlike a niceness, an affinity may be widened again without privileges, within the CPUs the
process was given (a container's cpuset, `taskset`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

__all__ = [
    "all_cpus",
    "background_cpus",
    "confine",
    "cpus_of",
    "each_thread",
    "release",
    "set_cpus",
    "thread_ids",
]

_all: frozenset[int] | None = None


def all_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on, as when first asked (None where a thread's CPUs cannot be set)."""
    global _all
    if not sys.platform.startswith("linux"):
        return None
    if _all is None:
        _all = frozenset(os.sched_getaffinity(0))
    return _all


def background_cpus() -> frozenset[int] | None:
    """All of `all_cpus()` but the lowest-numbered one, when there are two or more; None when background
    work is not confined (one CPU, or not Linux)."""
    cpus = all_cpus()
    if cpus is None or len(cpus) < 2:
        return None
    return cpus - {min(cpus)}


def _set_thread(tid: int, cpus: frozenset[int] | None) -> bool:
    if cpus is None:
        return False
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError:
        return False
    return True


def confine(tid: int = 0) -> bool:
    """Keep thread `tid` (0: the calling thread; the threads it starts later inherit this) to
    `background_cpus()`. False when nothing was done."""
    return _set_thread(tid, background_cpus())


def release(tid: int = 0) -> bool:
    """Let thread `tid` (0: the calling thread) run on every CPU of `all_cpus()` again."""
    return _set_thread(tid, all_cpus())


def thread_ids(pid: int) -> list[int] | None:
    """The ids of the threads of process `pid` (Linux; None when they cannot be read)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return None


def each_thread(pid: int, apply: Callable[[int], object]) -> bool:
    """Call `apply(tid)` for every thread of process `pid` (Linux keeps a thread's CPUs, niceness and
    scheduling policy per thread). False when the threads cannot be read or one refused (OSError); a
    thread that ended meanwhile is skipped, and one that refused does not stop the others."""
    if (tids := thread_ids(pid)) is None:
        return False
    done = True
    for tid in tids:
        try:
            apply(tid)
        except ProcessLookupError:
            continue
        except OSError:
            done = False
    return done


def set_cpus(pid: int, cpus: frozenset[int] | None) -> bool:
    """Give every thread of process `pid` (one of this user's) the CPUs `cpus`. False when `cpus` is None
    or a thread refused; a thread that ended meanwhile is skipped."""
    if cpus is None:
        return False
    return each_thread(pid, lambda tid: os.sched_setaffinity(tid, cpus))


def cpus_of(tid: int) -> frozenset[int] | None:
    """The CPUs thread `tid` may run on (None where that cannot be read, or it ended)."""
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError):
        return frozenset(os.sched_getaffinity(tid))
    return None
