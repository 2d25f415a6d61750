"""app/core/embeddings/load.py: the one count of calls in flight, and the quiet moment after the last one."""

from __future__ import annotations

import pytest

from app.core.embeddings.load import Load


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_calls_in_flight_are_counted_in_and_out() -> None:
    load = Load()
    assert load.in_flight == 0 and not load.busy(0.05)
    load.call_started()
    with load.call():
        assert load.in_flight == 2
    assert load.in_flight == 1
    load.call_finished()
    assert load.in_flight == 0


def test_a_call_that_raises_is_counted_out() -> None:
    load = Load()
    with pytest.raises(RuntimeError), load.call():
        raise RuntimeError("failed")
    assert load.in_flight == 0


def test_busy_while_a_call_runs_and_for_the_quiet_gap_after_it() -> None:
    clock = Clock()
    load = Load(clock)
    with load.call():
        clock.now += 10  # a long call is busy throughout
        assert load.busy(0.05)
    clock.now += 0.04
    assert load.busy(0.05)  # think time between one client's calls
    clock.now += 0.02
    assert not load.busy(0.05)
    assert load.busy(1.0)  # a longer quiet bound: still within it
