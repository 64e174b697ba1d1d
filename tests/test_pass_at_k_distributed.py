"""Two CPU processes (torchrun, gloo): `PassAtKCallback` shards the problems, gathers the counts and answer classes,
and logs identical pass@k, pass^k, maj@k and intervals on both ranks."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trl_rlvr_ext.evaluation import pass_metrics


SCRIPT = Path(__file__).parent / "distributed" / "pass_at_k_ddp.py"


def run_torchrun(*args: str, timeout: int = 300) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    assert torchrun is not None, "torchrun not found next to the test interpreter"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "1"}
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", str(SCRIPT), *args]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


@pytest.mark.distributed
def test_two_ranks_shard_problems_gather_counts_and_log_identical_numbers(tiny_model_path, tmp_path):
    run_torchrun(tiny_model_path, str(tmp_path))
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert len(rank0["history"]) == len(rank1["history"]) == 2  # eval_steps=1, max_steps=2
    # problem i is sampled by rank i % 2; the shards are padded to equal length with a repeat of the last problem
    prompts = [f"{i}-1=" for i in range(5)]
    for evaluation in range(2):
        shard0, shard1 = rank0["local"][evaluation], rank1["local"][evaluation]
        assert shard0["prompts"] == [prompts[0], prompts[2], prompts[4]]
        assert shard1["prompts"] == [prompts[1], prompts[3], prompts[3]]
        # the gathered counts are the ranks' own counts, put back in problem order, identical on both ranks
        expected_counts = [shard0["counts"][0], shard1["counts"][0], shard0["counts"][1], shard1["counts"][1]]
        expected_counts.insert(4, shard0["counts"][2])
        expected_classes = [shard0["classes"][0], shard1["classes"][0], shard0["classes"][1], shard1["classes"][1]]
        expected_classes.insert(4, shard0["classes"][2])
        for rank in (rank0, rank1):
            assert rank["gathered"][evaluation]["counts"] == expected_counts
            assert rank["gathered"][evaluation]["classes"] == expected_classes
        # the logged numbers are those of the pure functions on the gathered counts, and the same on both ranks
        classes = [[tuple(c) for c in problem] for problem in expected_classes]
        values, intervals = pass_metrics(
            np.full(5, 4), expected_counts, None, classes, confidence_level=0.95, num_resamples=200, seed=0
        )
        step0, metrics0 = rank0["history"][evaluation]
        step1, metrics1 = rank1["history"][evaluation]
        assert step0 == step1 == evaluation + 1
        assert metrics0 == metrics1
        for name, value in values.items():
            assert metrics0[f"eval/{name}"] == value
            assert (metrics0[f"eval/{name}_ci_low"], metrics0[f"eval/{name}_ci_high"]) == intervals[name]
        assert {"eval/pass@4", "eval/pass^4", "eval/maj@4", "eval/maj@4_ci_high"} <= set(metrics0)
    # the void-test guard: the counts are neither all zero nor all full, and there are several answers to vote on
    all_counts = rank0["gathered"][0]["counts"] + rank0["gathered"][1]["counts"]
    assert 0 < sum(all_counts) < 4 * len(all_counts)
    assert any(len(problem) > 1 for problem in rank0["gathered"][0]["classes"])
    assert [log for log in rank0["logged"] if log] == [log for log in rank1["logged"] if log]
