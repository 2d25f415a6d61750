"""The pool of DuckDB worker processes the server can kill, and the calls made through it (`offload`).

DuckDB checks an interrupt only between vectors, so a scalar function busy on one huge value
(`levenshtein` over two very long strings) outruns the statement watchdog
(`watchdog.run_with_timeout`). So the server runs every DuckDB call in a worker process:

- **Processes.** A `WorkerPool` keeps `size + burst` long-lived workers, one per engine slot
  (`CAIRN_DATASETS_MAX_CONCURRENCY`, and the burst slots of `CAIRN_DATASETS_BURST_SLOTS`, at most as
  many), and `SPARE` more, so a started worker is there for the next call while a replacement starts.
  Each is `python -I -c process.BOOT` in a session of its own. It imports the engine modules but not
  the feature's package, which builds the web layer. Each worker keeps its own pool of locked
  databases (`databases.POOL`, with the same leases, resets and lockdown). One worker is a
  `process.WorkerProcess`; its own side of the channel is `worker.serve`.
- **Memory.** DuckDB's `memory_limit` counts only DuckDB's buffers. So each worker also has a cap on
  its resident memory (`CAIRN_DATASETS_WORKER_MEMORY_MB`). The server checks it every
  `process.MEMORY_CHECK_S` while the worker serves a call, and a worker past it is killed (5002).
  `RLIMIT_DATA` (twice the cap) stops a sudden huge allocation in between (5002 as well). A worker
  whose memory stays above half its cap after a call is replaced, so an idle worker never holds much.
- **IPC.** A socket pair per worker carries pickles (`multiprocessing.connection`). A request holds a
  reference to a module-level engine function (not its code) and that function's arguments: the
  `EngineConfig`, sources and paths. The reply holds the function's value or its `CairnError` (class,
  message, suggestions, details, query context). A query's full result never travels: the worker
  writes it to the result store as Parquet and answers with its metadata and first rows, cut to a
  reply's bounds.
  A caller of `run_staged` may get an early reply (`ipc.answer_early`: a result whose rows are all
  in the answer, sent before its file is written); the final reply follows, and until it comes the
  worker and the slot stay taken. After replying, the worker checks the databases its call used for
  leftovers (`databases.ConnectionPool.settle`) before it reads the next request.
- **Conversations.** A call made on the event loop to a worker that has greeted is conducted there
  (`_converse_here`): the request is written, and the replies are read whenever the channel is
  readable, with the memory and priority checks in between, so the call costs no thread hop either
  way. What blocks (starting a replacement, reaping a dead worker) runs in a thread. A call made from a
  thread (`run_sync`), or one that finds its worker not started or gone, is conducted in a thread
  (`_converse`), one per slot at most.
- **Time.** The worker's watchdog interrupts the statement when the call's time limit is reached (5003,
  and the worker is kept). If no answer has come `GRACE_S` later, the server kills the worker
  (SIGKILL), answers 5003 and starts a replacement.
- **Warm start.** A new worker (a replacement) opens the locked databases of the latest calls'
  lockdowns (up to `RECENT_LOCKDOWNS`) before it greets, and a call takes a worker that has greeted
  before one still starting: a replacement costs the next caller nothing (it would otherwise open its
  databases during that caller's call).
- **Death.** A worker that dies during a call (killed, crashed) gives its caller 5030, to retry. Its
  scratch files are removed (`<work>/tmp/w<pid>`, `<results>/*.<pid>.tmp`) and a fresh worker takes
  its place. A result file appears only when a complete file is renamed into place, so nothing
  half-written is left. A worker that runs out of memory answers 5002 and is replaced as well.
- **Priority.** A call still running after `demote_after` seconds (`CAIRN_DATASETS_LONG_CALL_MS`) has
  every thread of its worker lowered by `demote_nice` (`CAIRN_DATASETS_LONG_CALL_NICE`, Linux): on a busy
  host the short calls of other callers get the CPU first, and on an idle one nothing changes (a
  niceness only matters when threads compete). While the server answers other calls too, its threads
  are also kept off one core, as the embedding queue's batches are (`app.core.cpus`,
  `CAIRN_DATASETS_LONG_CALL_CONFINE`): other callers keep a core however much lowered work runs, and a
  long query alone on the host keeps every core (checked every `process.MEMORY_CHECK_S`). When the
  call ends the worker's threads go back to their priority and CPUs; where the server may not raise a
  priority again (no `CAP_SYS_NICE`, as in a container), the worker is replaced by a fresh one
  instead. Where it may (`priority.may_raise`), three things more:
  - a lowered worker also runs under SCHED_IDLE (`priority.set_idle`): a thread of another call that
    wakes up takes its CPU at once, instead of waiting for the end of its time slice;
  - a caller whose call ran long less than `priority.LOWERED_FOR_S` ago has its next calls start
    lowered (`priority.LongCallers`): a key that keeps sending long calls no longer gets their first
    `demote_after` seconds at full priority;
  - the replacement of a worker killed during a call starts lowered, since its start-up (importing
    DuckDB and the engine) is the cost of the call that outran its limits; it is put back when another
    caller's call takes it.
- **Orphans.** A worker holds the read end of a pipe, and only the server holds its write end. When the
  server exits, however it exits, the pipe closes and a thread of the worker ends the worker at once.
- **Fairness.** `slots.FairSlots`: a call takes one of the `size` slots, and one caller holds at most
  `per_key` of them (`CAIRN_DATASETS_MAX_CONCURRENCY_PER_KEY`, default half, rounded up). A caller is
  an API key, or the project a bound key is limited to (`service_common.caller_of`): the keys a
  project's admin key mints share its turns. While it waits for a slot a call holds no thread. A freed
  slot goes to the waiting caller holding the fewest, then the one served least recently (round robin
  across callers). A caller holding no slot, none of whose calls took two seconds or more lately
  (`priority.LongCallers.heavy`), takes a burst slot when the others are taken: another caller's short
  call never waits for long ones, which run lowered meanwhile. A caller with `QUEUE_PER_SLOT * per_key`
  calls already waiting gets 4290.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from app.core.errors import EngineError, MemoryLimit, Timeout, Unavailable
from app.core.job_slot import job_slot_taken
from app.datasets.engine.databases import EngineConfig, Lockdown
from app.datasets.engine.ipc import Reply, WorkerGone
from app.datasets.engine.priority import LongCallers, may_raise
from app.datasets.engine.process import OverMemory, WorkerProcess
from app.datasets.engine.slots import FairSlots

T = TypeVar("T")
P = ParamSpec("P")
log = logging.getLogger("cairn.datasets.worker")

# How long after the call's time limit a worker that has not answered is killed: the statement's own
# interrupt usually lands well within it, and then the worker (and its databases) are kept.
GRACE_S = 0.5
# How long a new worker may take to start (import DuckDB and the engine).
BOOT_TIMEOUT_S = 60.0
# Calls one caller may have waiting for a slot, per slot it may hold.
QUEUE_PER_SLOT = 4
MB = 1024 * 1024
# Lockdowns (projects' databases) a new worker opens before it takes calls.
RECENT_LOCKDOWNS = 4
# Workers beyond the slots: a started one is there for the next call while a replacement starts, e.g.
# after a call that outran its time limit was killed.
SPARE = 1
# Memory a worker needs beyond DuckDB's own limit: Python, the engine modules, rows being converted.
WORKER_HEADROOM = 1024 * MB


def memory_bytes(setting_mb: int, duckdb_limit: str) -> int:
    """A worker's memory cap: `setting_mb` MB, or by default DuckDB's `memory_limit` plus
    `WORKER_HEADROOM` (4 GB when the limit is not a plain size such as '2GB' or '512 MiB')."""
    if setting_mb > 0:
        return setting_mb * MB
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(I?B)?\s*", duckdb_limit.upper())
    if m is None:
        return 4096 * MB
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * scale) + WORKER_HEADROOM


class WorkerPool:
    """`size` fair slots and `burst` more (for callers holding none) served by `size + burst + SPARE`
    worker processes (see the module's docstring)."""

    def __init__(
        self,
        size: int,
        per_key: int,
        memory: int,
        demote: tuple[float, int, bool] = (0.0, 0, False),
        burst: int = 0,
    ) -> None:
        self.spec = (size, per_key, memory, demote, burst)
        self.size = size
        self.burst = burst
        self.memory = memory
        self.demote = demote
        self._long = LongCallers()
        self.slots = FairSlots(
            size, per_key, QUEUE_PER_SLOT * max(1, per_key), burst, lambda caller: not self._long.heavy(caller)
        )
        self._lock = threading.Lock()
        self._closed = False
        self._idle: list[WorkerProcess] = []
        self._busy: set[WorkerProcess] = set()
        self._gone_opened = 0
        self.replaced = 0
        # Lowering a priority ahead of time is only done where it can be undone.
        self.may_raise = demote[1] > 0 and may_raise(os.getpriority(os.PRIO_PROCESS, 0))
        # The conversations with busy workers: at most one per slot, so a call never waits for a thread.
        self._threads = ThreadPoolExecutor(size + burst, thread_name_prefix="cairn-duckdb")
        for _ in range(size + burst + SPARE):
            self._idle.append(self._spawn([]))
        # The configurations of the latest calls (one per lockdown): a new worker opens their databases
        # before it greets, so its first call costs no more than the next.
        self._recent: dict[Lockdown, EngineConfig] = {}

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    def pids(self) -> list[int]:
        """The worker processes' ids (idle and busy)."""
        with self._lock:
            return [w.pid for w in [*self._idle, *self._busy]]

    def busy_pids(self) -> list[int]:
        """The ids of the workers serving a call now."""
        with self._lock:
            return [w.pid for w in self._busy]

    def databases_opened(self) -> int:
        """Locked databases the workers have opened (those gone included)."""
        with self._lock:
            return self._gone_opened + sum(w.opened for w in [*self._idle, *self._busy])

    async def run(self, caller: str, fn: Callable[..., Any], cfg: EngineConfig, args: Any, kwargs: Any) -> Any:
        """`fn(cfg, *args, **kwargs)` in a worker, once `caller` has a slot."""
        return await asyncio.shield(await self._start(caller, fn, cfg, args, kwargs, None))

    async def run_staged(
        self, caller: str, fn: Callable[..., Any], cfg: EngineConfig, args: Any, kwargs: Any
    ) -> tuple[Any, asyncio.Future[Any] | None]:
        """`run` for a function that may answer before it finishes (`ipc.answer_early`): its early
        value and the future of its final one, or its value and None when it answered only at the end.
        The worker and the slot stay taken until the final answer."""
        loop = asyncio.get_running_loop()
        first: asyncio.Future[Any] = loop.create_future()

        def take(value: Any) -> None:
            if not first.done():
                first.set_result(value)

        def early(value: Any) -> None:  # in the conversation's thread
            loop.call_soon_threadsafe(take, value)

        done = await self._start(caller, fn, cfg, args, kwargs, early)
        # One shield, awaited below when it ends first: a second one would hold an exception nobody reads.
        final = asyncio.shield(done)
        await asyncio.wait([first, final], return_when=asyncio.FIRST_COMPLETED)
        if first.done():
            final.add_done_callback(_consume)
            return first.result(), done
        first.cancel()
        return await final, None

    async def _start(
        self,
        caller: str,
        fn: Callable[..., Any],
        cfg: EngineConfig,
        args: Any,
        kwargs: Any,
        early: Callable[[Any], None] | None,
    ) -> asyncio.Future[Any]:
        """Take a slot for `caller` and a worker, and start the conversation in a thread: its future. A
        long-running call's job slot is taken first (`job_slot_taken`): no work starts for a refused call."""
        await job_slot_taken()
        await self.slots.acquire(caller)
        try:
            worker = self._checkout()
        except BaseException:
            self.slots.release(caller)
            raise
        done: asyncio.Future[Any]
        try:
            # The usual case (see `_converse_here`). `alive`, not `proc.poll`: a killed worker is a zombie
            # with its channel still open until its last thread has ended, and would take the request.
            if worker.ready and worker.alive():
                done = asyncio.ensure_future(self._converse_here(caller, worker, (fn, cfg, args, kwargs), early))
            else:
                done = asyncio.get_running_loop().run_in_executor(
                    self._threads, self._converse, caller, worker, (fn, cfg, args, kwargs), early
                )
        except BaseException as exc:
            self._checkin(worker)
            self.slots.release(caller)
            if isinstance(exc, RuntimeError):  # the pool was closed meanwhile: the server is stopping
                raise EngineError("The DuckDB workers are stopping", suggestions=["Retry"]) from None
            raise
        done.add_done_callback(_consume)
        # A caller that goes away (cancelled) leaves the conversation to end by itself (callers await it
        # shielded): it returns the worker and the slot.
        return done

    def run_sync(self, caller: str, fn: Callable[..., Any], cfg: EngineConfig, args: Any, kwargs: Any) -> Any:
        """`run` for a thread."""
        self.slots.acquire_sync(caller)
        try:
            worker = self._checkout()
        except BaseException:
            self.slots.release(caller)
            raise
        return self._converse(caller, worker, (fn, cfg, args, kwargs), None)

    def _checkout(self) -> WorkerProcess:
        with self._lock:
            # One worker per slot (burst ones included) and a spare, and a slot is held: one is idle. A
            # replacement may still be starting, or one may have died while idle: a started, unreaped one
            # is taken first. (This runs on the event loop: `alive` reads /proc, so only the worker taken
            # is looked at so.)
            if not self._idle:
                worker = self._spawn(list(self._recent.values()))
            else:
                ready = [i for i, w in enumerate(self._idle) if w.proc.poll() is None and w.started()]
                worker = self._idle.pop(ready[-1] if ready else -1)
            self._busy.add(worker)
            return worker

    def _spawn(self, warm: list[EngineConfig], lowered: bool = False) -> WorkerProcess:
        """Start a worker of this pool (`warm`: the configurations whose databases it opens first;
        `lowered`: it starts at the lowered priority, where that can be undone)."""
        return WorkerProcess(self.memory, warm, self.demote, lowered=lowered and self.may_raise, idle=self.may_raise)

    def _checkin(self, worker: WorkerProcess) -> None:
        with self._lock:
            self._busy.discard(worker)
            closed = self._closed
            if not closed:
                self._idle.append(worker)
        if closed:
            worker.end()

    def _replace(self, worker: WorkerProcess, kill: bool, lowered: bool = False) -> WorkerProcess:
        """End `worker` and start another in its place (not yet started when the pool is closed);
        `lowered`: the call it served outran its limits, and the replacement, whose start-up is that call's cost,
        starts at the lowered priority."""
        worker.end(kill=kill)
        with self._lock:
            warm = list(self._recent.values())
        replacement = self._spawn(warm, lowered)
        with self._lock:
            self._busy.discard(worker)
            self._busy.add(replacement)
            self._gone_opened += worker.opened
            self.replaced += 1
        return replacement

    def _renew_dead(self) -> None:
        """Replace the idle workers that died (killed while idle), so that the spare is a living one."""
        with self._lock:
            dead = [w for w in self._idle if not w.alive()]
            for worker in dead:
                self._idle.remove(worker)
            warm = list(self._recent.values())
        for worker in dead:
            log.warning("DuckDB worker %s ended while idle (%s)", worker.pid, worker.how_it_ended())
            worker.end(kill=True)
            try:
                fresh = self._spawn(warm)
            except OSError as exc:  # e.g. no process left: a call that finds no idle worker starts one
                log.error("could not start a DuckDB worker: %s", exc)
                continue
            with self._lock:
                self._gone_opened += worker.opened
                self.replaced += 1
                closed = self._closed
                if not closed:
                    self._idle.append(fresh)
            if closed:
                fresh.end()

    def _ready(self, worker: WorkerProcess) -> WorkerProcess:
        """A started worker: `worker`, or a replacement when it died while idle or failed to start
        (WorkerGone when two replacements in a row fail to start)."""
        for _ in range(2):
            if worker.alive():
                try:
                    worker.wait_ready(BOOT_TIMEOUT_S)
                    return worker
                except WorkerGone:
                    pass
            log.warning("DuckDB worker %s ended before a call (%s)", worker.pid, worker.how_it_ended())
            worker = self._replace(worker, kill=True)
        worker.wait_ready(BOOT_TIMEOUT_S)
        return worker

    def _converse(
        self, caller: str, worker: WorkerProcess, request: tuple[Any, ...], early: Callable[[Any], None] | None
    ) -> Any:
        """Run one request on `worker`, in a thread; give back the worker (or its replacement) and the
        slot however it ends. An early answer goes to `early` (a caller of `run` gets none: its
        function was not told it may answer early) and the conversation waits for the final one."""
        fn, cfg, args, kwargs = request
        served: WorkerProcess | None = None
        began = time.monotonic()
        try:
            self._renew_dead()
            self._note(cfg)
            try:
                worker = self._ready(worker)
            except WorkerGone:
                raise Unavailable(
                    "The DuckDB worker process could not start",
                    suggestions=["Retry shortly; if it persists, the server's log says why"],
                    headers={"Retry-After": "1"},
                ) from None
            worker.works.add(cfg.work)
            message = (fn, cfg, args, kwargs, cfg.timeout_s, early is not None)
            served = worker
            try:
                deadline = time.monotonic() + cfg.timeout_s + GRACE_S
                try:
                    self._fit_priority(caller, worker)
                    reply = worker.call(message, cfg.timeout_s + GRACE_S)
                except WorkerGone as gone:
                    if gone.sent:
                        raise
                    worker = served = self._ready(self._replace(worker, kill=True))  # never saw it: once more
                    worker.works.add(cfg.work)
                    deadline = time.monotonic() + cfg.timeout_s + GRACE_S
                    self._fit_priority(caller, worker)
                    reply = worker.call(message, cfg.timeout_s + GRACE_S)
                if reply is not None and reply.status == "early":
                    if early is not None:
                        early(reply.value)
                    reply = worker.wait(deadline)
            except OverMemory:
                log.warning("DuckDB worker %s passed its memory cap: killed", worker.pid)
                worker = self._replace(worker, kill=True, lowered=True)
                raise self._over_memory() from None
            except WorkerGone:
                how, worker = self._bury(worker)
                raise _died(how) from None
            if reply is None:
                log.warning("DuckDB worker %s outran its time limit: killed", worker.pid)
                worker = self._replace(worker, kill=True, lowered=True)
                raise _outran()
            if self._spent(worker, reply):
                worker = self._replace(worker, kill=False)
            return reply.unwrap()
        finally:
            if served is not None:
                self._long.ended(caller, served, time.monotonic() - began)
            self._checkin(worker)
            self.slots.release(caller)

    async def _converse_here(
        self, caller: str, worker: WorkerProcess, request: tuple[Any, ...], early: Callable[[Any], None] | None
    ) -> Any:
        """`_converse` on the event loop, for a worker that has greeted: the request is sent and the
        replies read as the channel becomes readable, so the call costs no thread hop either way. What
        blocks (a replacement: starting a process, reaping one) runs in a thread; a request
        the worker never got (it died while idle) goes to `_converse`, which replaces it."""
        fn, cfg, args, kwargs = request
        loop = asyncio.get_running_loop()
        handed = False
        answered = False
        served: WorkerProcess | None = None
        began = time.monotonic()
        try:
            if any(w.proc.poll() is not None for w in self._idle_now()):  # off the loop: it starts processes
                loop.run_in_executor(None, self._renew_dead).add_done_callback(_consume)
            self._note(cfg)
            worker.works.add(cfg.work)
            deadline = time.monotonic() + cfg.timeout_s + GRACE_S
            self._fit_priority(caller, worker)
            try:
                worker.send((fn, cfg, args, kwargs, cfg.timeout_s, early is not None))
                served = worker
            except WorkerGone:
                try:
                    rest = loop.run_in_executor(self._threads, self._converse, caller, worker, request, early)
                except RuntimeError:  # the pool was closed meanwhile: the server is stopping
                    raise EngineError("The DuckDB workers are stopping", suggestions=["Retry"]) from None
                handed = True  # `_converse` gives the worker and the slot back
                return await rest
            try:
                reply = await worker.wait_async(deadline)
                if reply is not None and reply.status == "early":
                    if early is not None:
                        early(reply.value)
                    reply = await worker.wait_async(deadline)
                answered = True
            except OverMemory:
                answered = True
                log.warning("DuckDB worker %s passed its memory cap: killed", worker.pid)
                worker = await loop.run_in_executor(None, self._replace, worker, True, True)
                raise self._over_memory() from None
            except WorkerGone:
                answered = True
                how, worker = await loop.run_in_executor(None, self._bury, worker)
                raise _died(how) from None
            if reply is None:
                log.warning("DuckDB worker %s outran its time limit: killed", worker.pid)
                worker = await loop.run_in_executor(None, self._replace, worker, True, True)
                raise _outran()
            if self._spent(worker, reply):
                worker = await loop.run_in_executor(None, self._replace, worker, False)
            return reply.unwrap()
        finally:
            if served is not None:
                self._long.ended(caller, served, time.monotonic() - began)
            if not answered and not handed:
                # Cancelled while the worker had the request (only when the loop is torn down): it may
                # still answer, so it must not take the next call; found dead, it is replaced.
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
            if not handed:
                self._checkin(worker)
                self.slots.release(caller)

    def _bury(self, worker: WorkerProcess) -> tuple[str, WorkerProcess]:
        """How `worker` died during a call (it may take a moment to tell), and its replacement."""
        how = worker.how_it_ended()
        log.warning("DuckDB worker %s died during a call (%s)", worker.pid, how)
        return how, self._replace(worker, kill=True, lowered=True)

    def _fit_priority(self, caller: str, worker: WorkerProcess) -> None:
        """Before a call: a caller of long calls starts lowered, anyone else's call runs at the worker's
        own priority (see `priority.LongCallers`); only where a priority can be raised again."""
        if self.may_raise:
            self._long.fit(caller, worker)

    def _idle_now(self) -> list[WorkerProcess]:
        with self._lock:
            return list(self._idle)

    def _note(self, cfg: EngineConfig) -> None:
        """Remember `cfg` among the latest calls' configurations (see `_recent`)."""
        with self._lock:
            lock = cfg.lockdown()
            self._recent.pop(lock, None)
            self._recent[lock] = cfg
            while len(self._recent) > RECENT_LOCKDOWNS:
                del self._recent[next(iter(self._recent))]

    def _spent(self, worker: WorkerProcess, reply: Reply) -> bool:
        """True when `worker` should be replaced after its call: it asked to be, or it grew (allocators
        keep what they took), or its priority could not be raised again (it would serve the next call
        slowly)."""
        return reply.recycle or worker.rss() > self.memory // 2 or not worker.promote()

    def _over_memory(self) -> MemoryLimit:
        return MemoryLimit(
            f"The query used more than {self.memory // MB} MB in its DuckDB worker and was stopped",
            suggestions=[
                "Aggregate or filter before selecting long values or many columns",
                "Raise CAIRN_DATASETS_WORKER_MEMORY_MB if this is expected",
            ],
        )

    def close(self) -> None:
        """Stop the idle workers now and the busy ones when their call ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.end()
        self._threads.shutdown(wait=False)


def _died(how: str) -> Unavailable:
    return Unavailable(
        f"The query's DuckDB worker process stopped during the call ({how}); nothing was kept",
        suggestions=["Run the query again", "If it fails again, filter or aggregate more"],
        headers={"Retry-After": "1"},
    )


def _outran() -> Timeout:
    return Timeout(
        "The query exceeded its time limit and was stopped",
        suggestions=[
            "Filter or aggregate more, or query a Parquet copy of the data",
            "Functions over very long values (e.g. levenshtein on long texts) cannot be interrupted",
        ],
    )


def _consume(done: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of a conversation whose caller went away, so it is not reported as lost."""
    if not done.cancelled():
        done.exception()


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def pool_for(cfg: EngineConfig) -> WorkerPool:
    """The process's worker pool for `cfg` (see `pool_of`)."""
    return pool_of(cfg.concurrency, cfg.memory_limit)


def pool_of(concurrency: int, memory_limit: str) -> WorkerPool:
    """The process's worker pool of `concurrency` slots for DuckDB's `memory_limit`, shaped by the
    current settings (a new pool when they changed)."""
    from app.datasets.config import get_dataset_settings

    settings = get_dataset_settings()
    size = max(1, concurrency)
    per_key = settings.datasets_max_concurrency_per_key or math.ceil(size / 2)
    demote = (
        settings.datasets_long_call_ms / 1000.0,
        settings.datasets_long_call_nice,
        settings.datasets_long_call_confine,
    )
    memory = memory_bytes(settings.datasets_worker_memory_mb, memory_limit)
    return current_pool(size, per_key, memory, demote, settings.datasets_burst_slots)


def current_pool(
    size: int, per_key: int, memory: int, demote: tuple[float, int, bool] = (0.0, 0, False), burst: int = 0
) -> WorkerPool:
    """The process's worker pool of this shape (at most `size` burst slots); the one of another shape,
    if any, is closed."""
    global _pool
    spec = (size, max(1, min(per_key, size)), memory, demote, max(0, min(burst, size)))
    with _pool_lock:
        pool = _pool
        if pool is not None and pool.spec == spec and not pool.closed:
            return pool
        _pool = WorkerPool(*spec)
        fresh = _pool
    if pool is not None:
        pool.close()
    return fresh


def existing_pool() -> WorkerPool | None:
    """The process's worker pool, if one was started and is open."""
    pool = _pool
    return pool if pool is not None and not pool.closed else None


def shutdown() -> None:
    """Stop the process's workers (idle ones now, busy ones when their call ends)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


atexit.register(shutdown)


_caller: ContextVar[str] = ContextVar("cairn_datasets_caller", default="")


def set_caller(caller: str) -> None:
    """Name whom the current call (task) works for (a key, or a bound key's project): the engine slots
    are shared between callers (`slots.FairSlots`)."""
    _caller.set(caller)


async def offload(
    fn: Callable[Concatenate[EngineConfig, P], T], cfg: EngineConfig, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`fn(cfg, *args, **kwargs)` run in a DuckDB worker process, once an engine slot is free for the
    caller (`set_caller`). `fn` is a module-level function of the engine (a reference to it travels, not
    its code); its arguments and value travel as pickles. Past `cfg.timeout_s` the statement is
    interrupted, and a worker that does not answer soon after is killed: 5003 either way."""
    value = await pool_for(cfg).run(_caller.get(), fn, cfg, args, kwargs)
    return cast(T, value)


async def offload_staged(
    fn: Callable[Concatenate[EngineConfig, P], T], cfg: EngineConfig, *args: P.args, **kwargs: P.kwargs
) -> tuple[T, asyncio.Future[T] | None]:
    """`offload` for a function that may answer before it ends (`ipc.answer_early`): its early
    value and the future of its final value (which raises what the function raised after answering),
    or its value and None when it answered only once."""
    value, final = await pool_for(cfg).run_staged(_caller.get(), fn, cfg, args, kwargs)
    return cast(T, value), final


def offload_sync(
    fn: Callable[Concatenate[EngineConfig, P], T], cfg: EngineConfig, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`offload` for code running in a thread (it blocks the thread while it waits)."""
    return cast(T, pool_for(cfg).run_sync(_caller.get(), fn, cfg, args, kwargs))
