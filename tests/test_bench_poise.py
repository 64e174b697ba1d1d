"""bench/poise_overhead.py's breakdown runs on the tiny model: both parts are timed on a buffer of the asked size, and
the POISE arm is the steady state (the probe is fitted after the first batch)."""

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import grpo_overhead
import poise_overhead


def test_poise_breakdown_times_both_parts(tiny_model_path, tmp_path):
    parts = poise_overhead.cost_breakdown(tiny_model_path, str(tmp_path), 2, 3, batch=8, completion_length=4)
    assert parts["features"] > 0 and parts["probe"] > 0 and parts["total"] == parts["features"] + parts["probe"]
    assert parts["buffer_rows"] == 24 and parts["steps_per_generation_batch"] == 2
    options = grpo_overhead.ARM_OPTIONS["poise"]
    assert options["value_baseline"] == "poise" and options["poise_bootstrap_steps"] == 1
