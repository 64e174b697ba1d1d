"""Two CPU processes (torchrun, gloo): the trainers must agree across ranks."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


DIST = Path(__file__).parent / "distributed"


def run_torchrun(script: str, *args: str, timeout: int = 300) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    assert torchrun is not None, "torchrun not found next to the test interpreter"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "1"}
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", str(DIST / script), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


@pytest.mark.distributed
def test_nsr_two_processes_agree(tiny_model_path, tmp_path):
    run_torchrun("nsr_ddp.py", tiny_model_path, str(tmp_path))
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["loss"] == rank1["loss"] and len(rank0["loss"]) == 4
    assert rank0["high_frac"] == rank1["high_frac"] and rank0["low_frac"] == rank1["low_frac"]
    assert max(rank0["clip_region"]) > 0, "clip never active: the test is void"
    assert max(h + lo for h, lo in zip(rank0["high_frac"], rank0["low_frac"])) > 0
    # DDP keeps replicas identical even though each rank draws its own NSR noise
    assert rank0["param_sum"] == rank1["param_sum"] and rank0["param_abs_sum"] == rank1["param_abs_sum"]


@pytest.mark.distributed
@pytest.mark.parametrize("curation", ["none", "pass_rate"])
def test_dynamic_sampling_two_processes_keep_the_same_groups(tiny_model_path, tmp_path, curation):
    run_torchrun("dynamic_sampling_ddp.py", tiny_model_path, str(tmp_path), curation)
    rank0 = json.loads((tmp_path / f"ds_{curation}_rank0.json").read_text())
    rank1 = json.loads((tmp_path / f"ds_{curation}_rank1.json").read_text())
    assert rank0["world_size"] == rank1["world_size"] == 2
    for rank in (rank0, rank1):
        assert "straddle two processes" in rank["straddle_error"]
    # identical decisions and state on both ranks
    assert rank0["kept"] == rank1["kept"] and len(rank0["kept"]) == 3
    assert rank0["stream"] == rank1["stream"] and rank0["stream"]["drawn"] > 0  # extra rounds drew prompts
    assert rank0["metrics"] == rank1["metrics"] and len(rank0["metrics"]) == 3
    assert rank0["global_prompts"] == rank1["global_prompts"]
    for batch, left, right in zip(rank0["global_prompts"], rank0["local_prompts"], rank1["local_prompts"]):
        assert batch == left + right and len(left) == len(right) == 4
        assert all(int(p.split("+")[0]) % 2 == 0 for p in batch)  # only informative groups
    assert all(m["dynamic_sampling/bound_hit"] == 0 for m in rank0["metrics"])
    assert rank0["param_sum"] == rank1["param_sum"]
