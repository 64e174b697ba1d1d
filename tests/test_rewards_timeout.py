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
import time
import types
from pathlib import Path

import pytest

from trl_rlvr_ext.rewards.math import math_accuracy_reward
from trl_rlvr_ext.rewards.timeout import TaskError, TaskTimeout, TimeoutPool


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
