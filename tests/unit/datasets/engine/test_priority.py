"""app/datasets/engine/priority.py: a caller whose call ran long has its next calls start lowered for
a while, anyone else's call runs at full priority, and a process's threads are lowered together."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from app.datasets.engine import priority
from app.datasets.engine.priority import LongCallers, set_idle, set_nice


class Worker:
    """A worker as the priority rules see it: whether it is lowered and whether its call ran long."""

    def __init__(self, long_call: bool = False) -> None:
        self.demoted = False
        self.long_call = long_call
        self.moves: list[str] = []

    def lower(self) -> None:
        self.demoted = True
        self.moves.append("lower")

    def promote(self) -> bool:
        self.demoted = False
        self.moves.append("promote")
        return True


def test_a_caller_of_long_calls_starts_lowered_and_others_do_not() -> None:
    callers = LongCallers()
    worker = Worker()
    callers.fit("heavy", worker)
    assert worker.moves == []  # nothing known of it yet: full priority
    callers.ended("heavy", Worker(long_call=True))
    callers.ended("light", Worker(long_call=False))  # a short call leaves no mark
    callers.fit("heavy", worker)
    callers.fit("heavy", worker)  # already lowered: nothing more
    callers.fit("light", worker)
    assert worker.moves == ["lower", "promote"]


def test_a_caller_of_calls_of_a_second_or_more_is_heavy_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    callers = LongCallers()
    callers.ended("brief", Worker(long_call=True), 0.2)  # past demote_after, but well short of HEAVY_S
    callers.ended("heavy", Worker(long_call=True), priority.HEAVY_S)
    assert callers.recent("brief") and not callers.heavy("brief")
    assert callers.heavy("heavy") and not callers.heavy("unknown")
    monkeypatch.setattr(priority, "LOWERED_FOR_S", 0.0)
    assert not callers.heavy("heavy")


def test_a_long_call_long_ago_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    callers = LongCallers()
    callers.ended("heavy", Worker(long_call=True))
    monkeypatch.setattr(priority, "LOWERED_FOR_S", 0.0)
    worker = Worker()
    callers.fit("heavy", worker)
    assert worker.moves == []
    callers.ended("other", Worker(long_call=True))  # forgetting happens as new long calls end
    assert "heavy" not in callers._ended


@pytest.fixture
def child() -> Iterator[int]:
    """A process of our own with a few threads."""
    code = (
        "import threading, time\n"
        "for _ in range(3): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    yield proc.pid
    proc.kill()
    proc.wait()


def thread_nices(pid: int) -> set[int]:
    return {os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
def test_every_thread_of_a_process_is_lowered(child: int) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert set_nice(child, min(19, base + 5))
    assert thread_nices(child) == {min(19, base + 5)}
    if priority.may_raise(base):
        assert set_idle(child, True)
        assert {os.sched_getscheduler(int(t)) for t in os.listdir(f"/proc/{child}/task")} == {os.SCHED_IDLE}
        assert set_idle(child, False) and set_nice(child, base)
        assert thread_nices(child) == {base}
    else:  # raising a priority again is refused here
        assert not set_nice(child, base)
