"""Background CPUs (app/core/embeddings/cpus.py): all of the process's CPUs but one, set per thread and given back."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from app.core.embeddings import cpus

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread CPUs are Linux's")


@linux
def test_background_cpus_are_all_but_the_lowest_numbered_one() -> None:
    mine = frozenset(os.sched_getaffinity(0))
    assert cpus.all_cpus() == mine
    if len(mine) < 2:
        assert cpus.background_cpus() is None
    else:
        assert cpus.background_cpus() == mine - {min(mine)}


@linux
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_confined_thread_and_the_threads_it_starts_keep_off_one_cpu_until_released() -> None:
    seen: dict[str, frozenset[int] | None] = {}

    def child() -> None:
        seen["child"] = cpus.cpus_of(0)

    def work() -> None:
        assert cpus.confine()
        seen["confined"] = cpus.cpus_of(threading.get_native_id())
        inner = threading.Thread(target=child)
        inner.start()
        inner.join()
        assert cpus.release()
        seen["released"] = cpus.cpus_of(0)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == {
        "confined": cpus.background_cpus(),
        "child": cpus.background_cpus(),
        "released": cpus.all_cpus(),
    }
    assert cpus.cpus_of(threading.get_native_id()) == cpus.all_cpus()  # the caller's own thread is untouched


@linux
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_set_cpus_covers_every_thread_of_a_process() -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        assert cpus.set_cpus(os.getpid(), cpus.background_cpus())
        assert {cpus.cpus_of(tid) for tid in tids} == {cpus.background_cpus()}
        assert cpus.set_cpus(os.getpid(), cpus.all_cpus())
        assert {cpus.cpus_of(tid) for tid in tids} == {cpus.all_cpus()}
        assert not cpus.set_cpus(os.getpid(), None)
    finally:
        stop.set()
        for t in threads:
            t.join()
        cpus.set_cpus(os.getpid(), cpus.all_cpus())
