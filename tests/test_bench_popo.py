"""bench/popo_overhead.py runs on the tiny model: both arms train whole steps, the POPO arm really is POPO, and the
ratio is a positive number."""

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import grpo_overhead
import popo_overhead


def test_popo_bench_times_both_arms(tiny_model_path, tmp_path):
    result = popo_overhead.step_ratios(tiny_model_path, str(tmp_path), 1, 3, batch=8, completion_length=4)
    assert result["ratio"] > 0 and result["stock_seconds"] > 0
    logs = [log for log in result["trainer"].state.log_history if "loss" in log]
    assert result["trainer"].args.objective == "popo" and "popo/nll_loss" in logs[-1]
    assert grpo_overhead.ARM_OPTIONS["popo"] == {"objective": "popo"}
