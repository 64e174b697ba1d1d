"""Bounded reward time: a completion that would make math-verify run for hours is scored 0 within `reward_timeout`,
on the main thread, in a worker thread, and in two processes at once; the worker pool kills and replaces stuck workers.

The checks that can hang run in a subprocess with a wall-clock limit: a C-level big-integer power holds the GIL, so a
hung verifier would also stall a ``Thread.join(timeout)`` in the test process itself.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from trl_rlvr_ext.rewards.math import math_accuracy_reward
from trl_rlvr_ext.rewards.timeout import TaskError, TaskTimeout, TimeoutPool, _pipe_cost, _pipe_room


pytest.importorskip("math_verify")

ROOT = Path(__file__).resolve().parents[1]
TOWER = "\\boxed{9^{9^{9^{9^{9}}}}}"  # runs for hours in math-verify off the main thread (measured: > 20 s, killed)
LIMIT_S = 90  # the subprocess's whole budget: interpreter start, imports, one worker start, and the 1 s timeout

_SCRIPT = textwrap.dedent(
    """
    import json, sys, threading, time
    from trl_rlvr_ext.rewards.math import math_accuracy_reward

    logged = []
    def score():
        return math_accuracy_reward(
            [{tower!r}, "so \\\\boxed{{3}}", "\\\\boxed{{4}}"], answer=["3"] * 3, reward_timeout=1.0,
            log_metric=lambda name, value: logged.append((name, value)),
        )

    start = time.monotonic()
    if sys.argv[1] == "thread":
        out = []
        worker = threading.Thread(target=lambda: out.append(score()), daemon=True)
        worker.start()
        worker.join()
        rewards = out[0]
    else:
        rewards = score()
    print(json.dumps({{"rewards": rewards, "logged": logged, "seconds": time.monotonic() - start}}), flush=True)
    """
).format(tower=TOWER)


def _launch(where: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, where], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _result(process: subprocess.Popen) -> dict:
    try:
        stdout, stderr = process.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"math_accuracy_reward hung on {TOWER!r}: no result within {LIMIT_S} s")
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def _assert_bounded(result: dict):
    assert result["rewards"] == [0.0, 1.0, 0.0]
    assert result["logged"] == [["rewards/timeouts", 1.0]]
    assert result["seconds"] < 30, result


@pytest.mark.parametrize("where", ["main", "thread"])
def test_pathological_completion_scores_zero_within_the_timeout(where):
    _assert_bounded(_result(_launch(where)))


def test_pathological_completion_is_bounded_in_two_processes_at_once():
    processes = [_launch("thread"), _launch("main")]
    for process in processes:
        _assert_bounded(_result(process))


def test_pool_matches_in_process_verification_on_ordinary_completions():
    completions = [
        "so \\boxed{72}",
        "so \\boxed{71}",
        "72 without a box",
        [{"role": "assistant", "content": "\\boxed{72}"}],
        "\\boxed{\\frac{144}{2}}",
        "$72$",
        "",
    ]
    answers = ["72"] * len(completions)
    in_process = math_accuracy_reward(completions, answer=answers, reward_timeout=None)
    assert math_accuracy_reward(completions, answer=answers) == in_process == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert math_accuracy_reward(["\\boxed{1}"], answer=[""]) == [None]  # unparsable gold: no reward


def test_timeout_pool_kills_and_replaces_a_stuck_worker():
    pool = TimeoutPool(workers=2)
    try:
        start = time.monotonic()
        results = pool.map(time.sleep, [(0.0,), (600.0,), (0.0,), (0.0,)], timeout=1.0)
        assert time.monotonic() - start < 30
        assert results[0] is None and results[2] is None and results[3] is None
        assert isinstance(results[1], TaskTimeout)
        assert pool.replaced == 1
        assert pool.map(abs, [(-2,), (3,)], timeout=30) == [2, 3]  # the replacement works
    finally:
        pool.close()


def test_timeout_pool_reports_task_errors_and_dead_workers():
    pool = TimeoutPool(workers=1)
    try:
        divided, died, after = (
            pool.map(divmod, [(1, 0)], timeout=30)
            + pool.map(os._exit, [(3,)], timeout=30)
            + (pool.map(abs, [(-1,)], timeout=30))
        )
        assert isinstance(divided, TaskError) and "ZeroDivisionError" in str(divided)
        assert isinstance(died, TaskError) and "exit code 3" in str(died)
        assert after == 1
    finally:
        pool.close()


def test_timeout_pool_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least one worker"):
        TimeoutPool(workers=0)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        TimeoutPool(workers=1).map(abs, [(1,)], timeout=0)


def test_workers_die_with_a_hard_killed_parent():
    """SIGKILL the process that owns a pool while a worker is stuck: no verifier is left running."""
    script = textwrap.dedent(
        """
        import threading, time
        from trl_rlvr_ext.rewards.timeout import TimeoutPool
        pool = TimeoutPool(workers=2)
        threading.Thread(target=pool.map, args=(time.sleep, [(600.0,), (600.0,)], 600.0), daemon=True).start()
        while len([w for w in pool._workers if w.ready]) < 2:
            time.sleep(0.05)
        print(" ".join(str(w.process.pid) for w in pool._workers), flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        worker_pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(worker_pids) == 2
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 20
    alive = worker_pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        time.sleep(0.1)
    assert not alive, f"worker processes {alive} outlived their killed parent"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:  # a zombie (state Z) has exited; it only waits for its reaper
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_timeout_pool_reports_a_task_function_the_workers_cannot_import():
    module = types.ModuleType("module_only_in_the_parent")
    exec("def f():\n    return 1", module.__dict__)  # noqa: S102 - a function whose module the workers cannot import
    sys.modules[module.__name__] = module
    pool = TimeoutPool(workers=1)
    try:
        (result,) = pool.map(module.f, [()], timeout=30)
        assert isinstance(result, TaskError) and "No module named 'module_only_in_the_parent'" in str(result)
        assert pool.map(abs, [(-4,)], timeout=30) == [4]  # the worker survived it
    finally:
        pool.close()
        del sys.modules[module.__name__]


@pytest.mark.slow
@pytest.mark.distributed
def test_bounded_in_two_process_training(tiny_model_path, tmp_path):
    """torchrun with 2 CPU processes: every completion of both ranks times out, training goes on, and the gathered
    `rewards/timeouts` metric counts them (4 completions per rank and call)."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    assert torchrun is not None, "torchrun not found next to the test interpreter"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "1"}
    script = ROOT / "tests" / "distributed" / "rewards_ddp.py"
    command = [torchrun, "--standalone", "--nproc_per_node", "2", str(script), tiny_model_path, str(tmp_path)]
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("two-process training with a pathological reward input hung")
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1)]
    for rank in ranks:
        assert rank["world_size"] == 2
        assert rank["timeouts"] == [4.0, 4.0] and rank["reward_mean"] == [0.0, 0.0]
        assert rank["seconds"] < 120


# Pipelined dispatch: a worker's pipe holds its next task while it runs one. `eval` of a string is the task function
# below, so that one call can mix sleeps, results and a dying worker (a builtin: the workers can import it).
def _sleep_then(seconds: float, value: object = None) -> str:
    return f"__import__('time').sleep({seconds}) or {value!r}"


@pytest.mark.parametrize("depth", [2, 3])
def test_a_queued_task_is_not_charged_the_time_it_waited_behind_its_predecessor(depth):
    """3 tasks of 0.6 s on 1 worker, timeout 1 s: each is sent while the one before runs, and none times out (with
    the clock started at sending, the second would be charged 1.2 s)."""
    pool = TimeoutPool(workers=1, queue_depth=depth)
    try:
        pool.map(abs, [(0,)], timeout=30)  # the worker is up
        start = time.monotonic()
        assert pool.map(eval, [(_sleep_then(0.6, i),) for i in range(3)], timeout=1.0) == [0, 1, 2]
        assert time.monotonic() - start >= 1.8  # one at a time
        assert pool.replaced == 0
    finally:
        pool.close()


def test_a_queued_task_that_overruns_its_own_timeout_is_bounded_from_when_it_began():
    """The second task's clock starts when the first one's result arrives (0.6 s in), so the call lasts at least
    0.6 + 1 s; the one after it was queued behind the stuck task and runs on the replacement worker."""
    pool = TimeoutPool(workers=1)
    try:
        (first_pid,) = pool.map(os.getpid, [()], timeout=30)
        start = time.monotonic()
        results = pool.map(
            eval, [(_sleep_then(0.6, "a"),), (_sleep_then(600),), ("__import__('os').getpid()",)], timeout=1.0
        )
        elapsed = time.monotonic() - start
        assert results[0] == "a" and isinstance(results[1], TaskTimeout)
        assert isinstance(results[2], int) and results[2] != first_pid  # re-run on the replacement
        assert 1.6 <= elapsed < 30, elapsed
        assert pool.replaced == 1
    finally:
        pool.close()


def _timed_out(result) -> bool:
    return isinstance(result, TaskTimeout)


def _died(result) -> bool:
    return isinstance(result, TaskError) and "exit code 3" in str(result)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(
    ("culprit", "settled", "replaced"), [(_sleep_then(600), _timed_out, 1), ("__import__('os')._exit(3)", _died, 0)]
)
def test_tasks_queued_behind_a_timed_out_or_dying_task_are_rerun_and_scored(workers, culprit, settled, replaced):
    """The task that times out or kills its worker is settled alone; the tasks queued behind it on that worker had
    not started: they run on another worker, are scored, and are not counted as timed out."""
    pool = TimeoutPool(workers=workers, queue_depth=3)
    try:
        results = pool.map(eval, [("6 * 7",), (culprit,)] + [(f"{i} + 1",) for i in range(6)], timeout=1.0)
        assert results[0] == 42 and settled(results[1])
        assert results[2:] == [i + 1 for i in range(6)]
        assert pool.replaced == replaced  # a death is not a timeout
        assert pool.map(abs, [(-5,)], timeout=30) == [5]
    finally:
        pool.close()


def test_results_are_in_input_order_whatever_order_they_finish_in():
    pool = TimeoutPool(workers=2)
    try:
        sleeps = [0.3, 0.0, 0.2, 0.0, 0.0, 0.1, 0.0, 0.25, 0.0, 0.0]
        assert pool.map(eval, [(_sleep_then(s, i),) for i, s in enumerate(sleeps)], timeout=30) == list(range(10))
        assert pool.map(abs, [(-i,) for i in range(300)], timeout=30) == list(range(300))
    finally:
        pool.close()


def test_a_task_too_large_for_the_pipe_is_not_queued_behind_a_stuck_one():
    """A message that does not fit in the pipe's free buffer waits for an idle worker: written behind a stuck task,
    it would block the parent inside `send`, where no deadline is enforced."""
    pool = TimeoutPool(workers=1)
    large = "x" * 300_000  # far beyond a pipe's 16-64 KiB
    out = []
    try:
        pool.map(abs, [(0,)], timeout=30)
        thread = threading.Thread(
            target=lambda: out.append(pool.map(eval, [(_sleep_then(600),), (f"len({large!r})",)], timeout=1.0)),
            daemon=True,
        )
        thread.start()
        thread.join(60)
        if thread.is_alive():  # unblock the parent's write so that the test ends
            for worker in list(pool._workers):
                worker.process.kill()
            thread.join(30)
            pytest.fail("the parent blocked writing a large task behind a stuck one")
        assert isinstance(out[0][0], TaskTimeout) and out[0][1] == len(large)
    finally:
        pool.close()


@pytest.mark.parametrize("sizes", [[0] * 40, [100] * 40, [4093] * 20, [4097] * 20, [9000, 20000, 3, 70000, 5, 4096]])
def test_pipe_cost_bounds_what_a_pipe_takes_without_a_blocking_write(sizes):
    """The accounting that decides whether a task may be queued: messages whose costs fit in `_pipe_room` are all
    written to a fresh pipe that nobody reads, without blocking (the write end is non-blocking: a full pipe raises)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    sender = Connection(write_end, readable=False)
    try:
        room, used, sent = _pipe_room(write_end), 0, 0
        for size in sizes:
            if used + _pipe_cost(size) > room:
                break
            sender.send_bytes(b"\0" * size)  # BlockingIOError if the accounting undercounts
            used, sent = used + _pipe_cost(size), sent + 1
        assert sent >= 1
    finally:
        sender.close()
        os.close(read_end)


def test_an_interrupted_map_leaves_no_queued_task_behind():
    """Ctrl-C mid-map: the workers that hold tasks (running or queued in their pipe) are killed, so the next call
    cannot read a stale result of the interrupted one."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    pool = TimeoutPool(workers=1, queue_depth=3)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        pool.map(abs, [(0,)], timeout=30)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            pool.map(eval, [(_sleep_then(0.3, "stale"),)] * 10, timeout=30)
        assert pool.map(abs, [(-1,), (-2,), (-3,)], timeout=30) == [1, 2, 3]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        pool.close()


def test_the_last_task_of_a_call_goes_to_the_worker_that_frees_first():
    """With 2 workers the last task is not queued behind the first (a 1 s task): it waits for the worker that
    finishes its short task, instead of 1 s behind the long one."""
    pool = TimeoutPool(workers=2)
    try:
        deadline = time.monotonic() + 60
        while not (len(pool._workers) == 2 and all(worker.ready for worker in pool._workers)):
            assert time.monotonic() < deadline, "the workers did not start"
            pool.map(abs, [(0,)], timeout=30)
        pid = "__import__('os').getpid()"
        long_pid, short_pid, last_pid = pool.map(eval, [(_sleep_then(1.0) + f" or {pid}",), (pid,), (pid,)], 30)
        assert last_pid == short_pid != long_pid
    finally:
        pool.close()


def test_a_worker_that_died_between_calls_is_replaced():
    """Killed while idle (e.g. by the kernel for memory): the next call's send finds its pipe broken, and the task
    runs on a replacement instead of the call raising BrokenPipeError."""
    pool = TimeoutPool(workers=1)
    try:
        pool.map(abs, [(0,)], timeout=30)
        (worker,) = pool._workers
        worker.process.kill()
        worker.process.wait()
        assert pool.map(abs, [(-1,), (-2,)], timeout=30) == [1, 2]
        assert worker not in pool._workers and pool.replaced == 0
    finally:
        pool.close()
