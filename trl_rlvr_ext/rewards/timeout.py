"""Run per-completion verifier work with a hard time bound, from any thread or process.

math-verify bounds its own work with ``signal.alarm``, which only fires on the main thread, and only between Python
bytecodes: a worker thread (TRL's async reward path, a user's thread pool) gets no bound at all, and a C-level big
integer power (``9^{9^{9^{9^{9}}}}``) is not interruptible even on the main thread. A bound that holds everywhere
needs a separate process that can be killed: `TimeoutPool` keeps a few persistent worker processes, and kills and
replaces a worker whose task runs past its deadline.

Each task gets ``timeout`` seconds of its own run time. A worker runs one task at a time, but its pipe usually holds
the next one too (`QUEUE_DEPTH`; not a task too large for the pipe's free buffer, nor the last ``workers - 1`` of a
call, which go to whichever worker frees first), so it starts that task the moment it sends a result instead of idling
for a round trip to the parent; a queued task's clock therefore starts when its predecessor's result reaches the parent
(the worker began it then), never when it was sent. When a worker is killed on a timeout, or dies, the tasks queued
behind the one it ran had not started: they go back to the pending queue and run on another worker.

The workers are fresh interpreters (``subprocess`` + pipes), not ``fork`` children (unsafe once torch or CUDA threads
run) nor ``multiprocessing`` spawn/forkserver children (which re-import the user's ``__main__``, re-running an
unguarded training script). Each worker dies with its parent (``PR_SET_PDEATHSIG`` on Linux, a watchdog thread
elsewhere), so a training run killed with SIGKILL leaves no verifier spinning on a CPU.
"""

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait


try:
    import fcntl
except ImportError:  # not POSIX: the pool cannot start workers there anyway (``pass_fds``)
    fcntl = None


# Seconds a new worker may take to start, import its modules and run its warm-up task.
WORKER_START_TIMEOUT = 120.0

# Tasks in flight per worker: the one it runs and one more already in its pipe, which it starts as soon as it sends
# the first one's result, while the parent receives that result and sends the next. Two suffice whenever a task runs
# longer than a pipe round trip (math-verify: milliseconds against about 0.1 ms). More would add nothing there, and
# would commit more not-yet-started tasks to a worker that may be stuck behind a long one (they wait out its timeout
# before they are re-queued) and to a worker that happens to finish last at the end of a call.
QUEUE_DEPTH = 2

# A task is only queued behind a running one if its message fits in the pipe's free buffer: a write to a full pipe
# would block the parent inside `send` behind a task that may never end, with no deadline enforced. Linux pipes are
# rings of pages (64 KiB unless the user's pipe quota is spent); a message written in one or two `write` calls (the
# 4-byte length header, then the payload) spans at most ``n // page + 2`` of them, the first possibly shared with the
# previous message. Elsewhere (BSD, macOS) the buffer counts bytes and holds at least 16 KiB.
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_SMALLEST_BYTE_PIPE = 16384
_PAGE_RING_PIPES = fcntl is not None and hasattr(fcntl, "F_GETPIPE_SZ")  # Linux: the kernel tells the pipe's size


def _pipe_room(fd: int) -> int:
    """Bytes of messages that fit in the pipe ``fd`` without a blocking write (see `_pipe_cost`)."""
    return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) if _PAGE_RING_PIPES else _SMALLEST_BYTE_PIPE


def _pipe_cost(size: int) -> int:
    """Pipe buffer bytes a message of ``size`` payload bytes may occupy, counted against `_pipe_room`."""
    if _PAGE_RING_PIPES:
        return (size // _PAGE + 2) * _PAGE
    return size + 12  # payload and the longest header


_BOOT = (
    "import sys\n"
    "from multiprocessing.connection import Connection\n"
    "inbox = Connection(int(sys.argv[1]), writable=False)\n"
    "outbox = Connection(int(sys.argv[2]), readable=False)\n"
    "sys.path[:] = inbox.recv()\n"
    "from trl_rlvr_ext.rewards.timeout import _worker_main\n"
    "_worker_main(inbox, outbox)\n"
)


class TaskTimeout:
    """Marker result of a task that ran past its deadline (its worker was killed)."""

    def __repr__(self):
        return "TaskTimeout()"


class TaskError(Exception):
    """A task raised (or its worker died) in a worker process; the message carries the remote traceback."""


def _die_with_parent() -> None:
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the kernel kills us when the parent dies
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
            return
        except (OSError, AttributeError):
            pass

    def watchdog():  # fallback: runs whenever the task releases the GIL
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watchdog, daemon=True).start()


def _worker_main(inbox: Connection, outbox: Connection) -> None:
    """Loop of a worker process: ``(preload, warmup)``, then ``(fn, args)`` tasks until the pipe closes."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; we die with it
    try:
        preload, warmup = inbox.recv()
        for setup in preload:
            setup()
        if warmup is not None:
            warmup[0](*warmup[1])
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        outbox.send(("start_failed", traceback.format_exc()))
        return
    outbox.send(("ready", None))
    while True:
        try:
            message = inbox.recv_bytes()
        except (EOFError, OSError):  # the parent closed the pipe, or died
            return
        try:
            fn, args = pickle.loads(message)  # inside the try: an unimportable `fn` is the task's error
            outbox.send(("ok", fn(*args)))
        except BaseException:  # noqa: BLE001 - one task's failure must not end the worker
            outbox.send(("error", traceback.format_exc()))


# Linux's PR_SET_PDEATHSIG fires when the *thread* that started the child exits, not the process: workers are
# started from this one long-lived thread, so a reward called from a short-lived thread does not orphan-kill them.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward-worker-spawner")


def _new_spawner_after_fork() -> None:  # a forked child has the executor but not its thread
    global _SPAWNER
    _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward-worker-spawner")


os.register_at_fork(after_in_child=_new_spawner_after_fork)


def _start_process(child_in: int, child_out: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _BOOT, str(child_in), str(child_out)],
        pass_fds=(child_in, child_out),
        stdin=subprocess.DEVNULL,
        close_fds=True,
    )


class _Worker:
    def __init__(self, preload: Sequence[Callable[[], object]], warmup: tuple | None):
        child_in, parent_out = os.pipe()
        parent_in, child_out = os.pipe()
        try:
            self.process = _SPAWNER.submit(_start_process, child_in, child_out).result()
        finally:
            os.close(child_in)
            os.close(child_out)
        self.outbox = Connection(parent_out, readable=False)
        self.inbox = Connection(parent_in, writable=False)
        self.outbox.send(list(sys.path))
        self.outbox.send((list(preload), warmup))
        self.ready = False
        self.started_at = time.monotonic()
        self.tasks: deque[_Task] = deque()  # in flight, in the order the worker runs them; the first one is running
        self.queued_bytes = 0  # `_pipe_cost` of the messages of `tasks`, against `room`
        self.room = _pipe_room(parent_out)
        self.broken = False  # a send failed: the worker died; its results so far are still read, then its EOF

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.inbox.close()
        self.outbox.close()


class _Task:
    __slots__ = ("cost", "deadline", "index", "message")

    def __init__(self, index: int):
        self.index, self.message, self.cost, self.deadline = index, None, 0, 0.0


class TimeoutPool:
    """A few persistent worker processes that run tasks ``fn(*args)`` under a per-task wall-clock bound.

    ``fn`` must be importable by the workers (a module-level function of an installed or ``sys.path`` module) and
    its arguments and result picklable. A task that runs past ``timeout`` seconds of its own run time gets
    `TaskTimeout`, and its worker is killed and replaced (the replacement starts in the background while the other
    workers go on); the tasks queued behind it on that worker had not started and run on another one.

    Args:
        workers (`int`): number of worker processes.
        preload (`Sequence[Callable]`): importable zero-argument functions each worker runs once at start (imports).
        warmup (`tuple`, *optional*): ``(fn, args)`` each worker runs once at start, so that lazy first-call costs
            (regex compilation, caches) are not charged to the first task's time budget.
        queue_depth (`int`): tasks in flight per worker, the running one included (`QUEUE_DEPTH`); 1 sends a worker
            its next task only after its result came back.
    """

    def __init__(
        self,
        workers: int = 2,
        preload: Sequence[Callable[[], object]] = (),
        warmup: tuple | None = None,
        queue_depth: int = QUEUE_DEPTH,
    ):
        if workers < 1:
            raise ValueError(f"TimeoutPool needs at least one worker, got workers={workers}.")
        if queue_depth < 1:
            raise ValueError(f"TimeoutPool needs queue_depth >= 1 (tasks in flight per worker), got {queue_depth}.")
        self._size, self._preload, self._warmup, self._depth = workers, tuple(preload), warmup, queue_depth
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.replaced = 0  # workers killed on a timeout and replaced (for tests and diagnostics)

    def _fill(self) -> None:
        while len(self._workers) < self._size:
            self._workers.append(_Worker(self._preload, self._warmup))

    def _check_start(self, worker: _Worker) -> None:
        """Mark ``worker`` ready if it said so; raise if it failed or took too long to start."""
        if worker.ready:
            return
        if worker.inbox.poll():
            try:
                status, detail = worker.inbox.recv()
            except (EOFError, OSError):
                status, detail = "start_failed", f"the worker process exited (code {worker.process.poll()})"
            if status != "ready":
                self._workers.remove(worker)
                worker.kill()
                raise RuntimeError(f"A reward worker process failed to start:\n{detail}")
            worker.ready = True
        elif time.monotonic() - worker.started_at > WORKER_START_TIMEOUT:
            self._workers.remove(worker)
            worker.kill()
            raise RuntimeError(
                f"A reward worker process did not start within {WORKER_START_TIMEOUT:.0f} s (imports and warm-up); "
                "the machine may be overloaded."
            )

    def map(self, fn: Callable, arg_tuples: Sequence[tuple], timeout: float) -> list:
        """``[fn(*args) for args in arg_tuples]``, each bounded by ``timeout`` seconds of wall-clock run time.

        Returns one entry per task, in input order: its result, a `TaskTimeout` instance, or a `TaskError` (the task
        raised, or its worker died while running it, e.g. killed for memory; the tasks queued behind it run on
        another worker). Thread-safe: concurrent calls run one after the other.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}.")
        with self._lock:
            if os.getpid() != self._pid:  # a forked copy of this pool: the workers belong to the parent
                self._workers, self._pid = [], os.getpid()
            results: list = [None] * len(arg_tuples)
            pending = deque(_Task(index) for index in range(len(arg_tuples)))
            try:
                while pending or any(worker.tasks for worker in self._workers):
                    self._fill()
                    for worker in list(self._workers):
                        self._check_start(worker)
                    self._dispatch(fn, arg_tuples, pending, timeout)
                    busy = [worker for worker in self._workers if worker.tasks]
                    wait_for = min((w.tasks[0].deadline for w in busy), default=0.0) - time.monotonic()
                    starting = [w.inbox for w in self._workers if not w.ready]
                    if starting or not busy:
                        wait_for = min(wait_for, 0.05) if busy else 0.05
                    ready = wait([w.inbox for w in busy] + starting, timeout=max(wait_for, 0.0))
                    for worker in busy:
                        if worker.inbox in ready:
                            self._receive(worker, results, pending, timeout)
                        elif time.monotonic() >= worker.tasks[0].deadline:
                            results[worker.tasks.popleft().index] = TaskTimeout()
                            self._discard(worker, pending)
                            self.replaced += 1
            except BaseException:
                # Interrupted mid-map (KeyboardInterrupt, a failed start): busy workers hold stale tasks, drop them.
                for worker in list(self._workers):
                    if worker.tasks:
                        self._workers.remove(worker)
                        worker.kill()
                raise
            return results

    def _dispatch(self, fn: Callable, arg_tuples: Sequence[tuple], pending: deque, timeout: float) -> None:
        """Send pending tasks: first one to each idle worker, then one more behind each running task, up to depth."""
        live = [worker for worker in self._workers if worker.ready and not worker.broken]
        for worker in live:
            if pending and not worker.tasks:
                self._send(worker, pending, fn, arg_tuples)
                if worker.tasks:  # the worker was idle: it starts the task now, so does its clock
                    worker.tasks[0].deadline = time.monotonic() + timeout
        for depth in range(1, self._depth):
            for worker in live:
                # The last `workers - 1` tasks of a call stay here for whichever worker frees first, rather than being
                # committed behind a task that may run long (or time out) while another worker idles.
                if len(pending) < self._size:
                    return
                if len(worker.tasks) == depth and not worker.broken:
                    self._send(worker, pending, fn, arg_tuples)

    def _send(self, worker: _Worker, pending: deque, fn: Callable, arg_tuples: Sequence[tuple]) -> None:
        """Send ``pending[0]`` to ``worker`` if the worker is idle or the message fits in its pipe's free buffer."""
        task = pending[0]
        if task.message is None:
            task.message = pickle.dumps((fn, arg_tuples[task.index]), protocol=pickle.HIGHEST_PROTOCOL)
            task.cost = _pipe_cost(len(task.message))
        if worker.tasks and worker.queued_bytes + task.cost > worker.room:
            return  # it waits for an idle worker: a blocking write would stall every deadline (see `_pipe_cost`)
        try:
            worker.outbox.send_bytes(task.message)
        except OSError:  # the worker died (BrokenPipeError); the task never reached it
            worker.broken = True
            if not worker.tasks:  # it died between tasks, no task's doing: replace it
                self._workers.remove(worker)
                worker.kill()
            return  # else `_receive` reads its results so far, then its EOF
        worker.tasks.append(pending.popleft())
        worker.queued_bytes += task.cost

    def _receive(self, worker: _Worker, results: list, pending: deque, timeout: float) -> None:
        """Record the results ``worker`` has sent (one message per task, in the order it runs them)."""
        while True:
            try:
                status, value = worker.inbox.recv()
            except (EOFError, OSError):
                code = worker.process.wait()
                results[worker.tasks.popleft().index] = TaskError(f"the worker process died (exit code {code})")
                self._discard(worker, pending)
                return
            task = worker.tasks.popleft()
            results[task.index] = value if status == "ok" else TaskError(value)
            worker.queued_bytes -= task.cost
            if not worker.tasks:
                return
            # The worker began its next task when it sent this result: that task's clock starts now, not when it was
            # sent, so that it is not charged the time it waited behind its predecessor.
            worker.tasks[0].deadline = time.monotonic() + timeout
            if not worker.inbox.poll():
                return

    def _discard(self, worker: _Worker, pending: deque) -> None:
        """Kill ``worker`` (its running task is settled); the tasks queued behind it had not started: re-queue them."""
        pending.extendleft(reversed(worker.tasks))
        worker.tasks.clear()
        self._workers.remove(worker)
        worker.kill()

    def close(self) -> None:
        with self._lock:
            for worker in self._workers:
                worker.kill()
            self._workers = []


_POOLS: dict[object, TimeoutPool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(key: object, **pool_kwargs) -> TimeoutPool:
    """The process-wide `TimeoutPool` registered under ``key`` (created on first use with ``pool_kwargs``)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = TimeoutPool(**pool_kwargs)
        return pool


def _close_pools() -> None:
    for pool in list(_POOLS.values()):
        pool.close()


atexit.register(_close_pools)

__all__ = ["TaskError", "TaskTimeout", "TimeoutPool", "get_pool"]
