"""Run per-completion verifier work with a hard time bound, from any thread or process.

math-verify bounds its own work with ``signal.alarm``, which only fires on the main thread, and only between Python
bytecodes: a worker thread (TRL's async reward path, a user's thread pool) gets no bound at all, and a C-level big
integer power (``9^{9^{9^{9^{9}}}}``) is not interruptible even on the main thread. A bound that holds everywhere
needs a separate process that can be killed: `TimeoutPool` keeps a few persistent worker processes, sends them one
task at a time, and kills and replaces a worker whose task runs past its deadline.

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


# Seconds a new worker may take to start, import its modules and run its warm-up task.
WORKER_START_TIMEOUT = 120.0

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

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.inbox.close()
        self.outbox.close()


class TimeoutPool:
    """A few persistent worker processes that run tasks ``fn(*args)`` under a per-task wall-clock bound.

    ``fn`` must be importable by the workers (a module-level function of an installed or ``sys.path`` module) and
    its arguments and result picklable. A task that runs past ``timeout`` seconds gets `TaskTimeout`, and its
    worker is killed and replaced (the replacement starts in the background while the other workers go on).

    Args:
        workers (`int`): number of worker processes.
        preload (`Sequence[Callable]`): importable zero-argument functions each worker runs once at start (imports).
        warmup (`tuple`, *optional*): ``(fn, args)`` each worker runs once at start, so that lazy first-call costs
            (regex compilation, caches) are not charged to the first task's time budget.
    """

    def __init__(self, workers: int = 2, preload: Sequence[Callable[[], object]] = (), warmup: tuple | None = None):
        if workers < 1:
            raise ValueError(f"TimeoutPool needs at least one worker, got workers={workers}.")
        self._size, self._preload, self._warmup = workers, tuple(preload), warmup
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
        """``[fn(*args) for args in arg_tuples]``, each bounded by ``timeout`` seconds of wall-clock time.

        Returns one entry per task: its result, a `TaskTimeout` instance, or a `TaskError` (the task raised, or its
        worker died, e.g. killed for memory). Thread-safe: concurrent calls run one after the other.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}.")
        with self._lock:
            if os.getpid() != self._pid:  # a forked copy of this pool: the workers belong to the parent
                self._workers, self._pid = [], os.getpid()
            results: list = [None] * len(arg_tuples)
            pending = deque(range(len(arg_tuples)))
            running: dict[_Worker, tuple[int, float]] = {}  # worker -> (task index, deadline)
            try:
                while pending or running:
                    self._fill()
                    for worker in list(self._workers):
                        self._check_start(worker)
                        if worker.ready and worker not in running and pending:
                            index = pending.popleft()
                            worker.outbox.send((fn, arg_tuples[index]))
                            running[worker] = (index, time.monotonic() + timeout)
                    now = time.monotonic()
                    deadlines = [deadline for _, deadline in running.values()]
                    wait_for = min(deadlines) - now if deadlines else 0.05
                    starting = [w.inbox for w in self._workers if not w.ready]
                    if starting:
                        wait_for = min(wait_for, 0.05)
                    ready = wait([w.inbox for w in running] + starting, timeout=max(wait_for, 0.0))
                    for worker, (index, deadline) in list(running.items()):
                        if worker.inbox in ready:
                            try:
                                status, value = worker.inbox.recv()
                            except (EOFError, OSError):
                                code = worker.process.wait()
                                status, value = "error", f"the worker process died (exit code {code})"
                                self._workers.remove(worker)
                                worker.kill()
                            results[index] = value if status == "ok" else TaskError(value)
                            del running[worker]
                        elif time.monotonic() >= deadline:
                            results[index] = TaskTimeout()
                            del running[worker]
                            self._workers.remove(worker)
                            worker.kill()
                            self.replaced += 1
            except BaseException:
                # Interrupted mid-map (KeyboardInterrupt, a failed start): busy workers hold stale tasks, drop them.
                for worker in running:
                    if worker in self._workers:
                        self._workers.remove(worker)
                    worker.kill()
                raise
            return results

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
