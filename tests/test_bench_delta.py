"""bench/delta_overhead.py's breakdown runs on the tiny model: every part is timed (the shared pass, TRL's own pass,
DelTA's own pass), and the timing wrappers are removed afterwards (the trainer module is left as it was)."""

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import delta_overhead

import trl_rlvr_ext.grpo.methods.delta as delta_module


def test_delta_breakdown_times_every_part(tiny_model_path, tmp_path):
    originals = delta_module.delta_token_weights, delta_module.delta_weight_stats
    parts = delta_overhead.cost_breakdown(tiny_model_path, str(tmp_path), 2, batch=8, completion_length=4)
    assert (delta_module.delta_token_weights, delta_module.delta_weight_stats) == originals
    assert parts["weights"] > 0 and parts["stats"] > 0 and parts["plain_pass"] > 0
    assert parts["capture"] > 0 and parts["total"] >= parts["weights"] + parts["stats"]
    assert parts["own_pass"] > parts["total"]  # its own forward pass, beside the same weights
    assert "pass_difference" in parts  # a difference of two timings of one forward pass: any sign
    assert parts["steps_per_generation_batch"] == 2 and parts["tokens"] == (8, 4)
