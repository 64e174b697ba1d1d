"""Two CPU processes (torchrun, gloo): curation draws the same prompts and holds the same state on both ranks."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


SCRIPT = Path(__file__).parent / "distributed" / "curation_ddp.py"
NORMALISER_SCRIPT = Path(__file__).parent / "distributed" / "curation_self_normaliser_ddp.py"


def run_torchrun(*args: str, timeout: int = 300, script: Path = SCRIPT) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    assert torchrun is not None, "torchrun not found next to the test interpreter"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "1"}
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", str(script), *args]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


@pytest.mark.distributed
@pytest.mark.parametrize("mode", ["self", "pass_rate"])
def test_two_ranks_draw_identical_prompts_and_hold_identical_state(tiny_model_path, tmp_path, mode):
    run_torchrun(tiny_model_path, str(tmp_path), mode)
    rank0 = json.loads((tmp_path / f"{mode}_rank0.json").read_text())
    rank1 = json.loads((tmp_path / f"{mode}_rank1.json").read_text())
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert len(rank0["global_rows"]) == 6
    # both ranks drew the same global batches, and each rank got its half of them
    assert rank0["global_rows"] == rank1["global_rows"]
    for batch, left, right in zip(rank0["global_rows"], rank0["local_rows"], rank1["local_rows"]):
        assert batch == left + right
        prompts = batch[::4]
        assert batch == [p for p in prompts for _ in range(4)] and len(set(prompts)) == 3  # whole groups
    assert any(batch[:6][-1] == batch[6:][0] for batch in rank0["global_rows"])  # a group straddles the ranks
    assert rank0["state"] == rank1["state"]
    assert rank0["sampler"] == rank1["sampler"]
    assert rank0["metrics"] == rank1["metrics"]
    assert rank0["param_sum"] == rank1["param_sum"]
    assert sum(rank0["state"]["trials"]) > 0
    if mode == "self":
        solved = [m["curation/greedy_solved_frac"] for m in rank0["metrics"]]
        assert 0 < max(solved) and min(solved) < 1, "greedy results are all equal: the test is void"
    # Pass@k callback: each rank evaluated its shard, the gathered counts give the same numbers on both
    assert len(rank0["pass_at_k"]) == 2 and rank0["pass_at_k"] == rank1["pass_at_k"]


@pytest.mark.distributed
def test_self_sequence_averaged_normaliser_is_exact_across_ranks_and_padding(tiny_model_path, tmp_path):
    """loss_type="grpo": ranks keep 4/0 and 2/4 rows in the two micro-batches of one window (so both pad a micro-batch
    with loss-free rows). The DDP-averaged gradient equals TRL's loss on one batch of the 10 kept rows: every kept
    sequence weighs 1/10 whatever its rank, micro-batch or padding."""
    run_torchrun(tiny_model_path, str(tmp_path), script=NORMALISER_SCRIPT)
    for rank in (0, 1):
        result = json.loads((tmp_path / f"normaliser_rank{rank}.json").read_text())
        assert result["world_size"] == 2 and result["num_kept"] == 10
        assert result["kept_counts"] == ([4, 0] if rank == 0 else [2, 4])
        assert result["scale"] > 1e-3
        assert result["max_diff"] < 1e-6 * result["scale"], result
