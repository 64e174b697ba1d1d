"""bench/dpo_overhead.py's direct timing of IS-DPO's own work runs on the tiny model: the four marked blocks are timed
inside real steps (more than nothing, less than the step), and the trainer's methods are its class's again after."""

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import dpo_overhead


def test_own_work_times_the_marked_blocks_inside_steps(tiny_model_path, tmp_path):
    trainer, inputs = dpo_overhead.build("is_dpo", tiny_model_path, 4, str(tmp_path))
    result = dpo_overhead.own_work(trainer, inputs, 2)
    assert 0 < result["own_work"] < result["step"]
    assert not set(dpo_overhead.IS_DPO_WORK) & set(vars(trainer))  # the timing wrappers are gone
    assert any(key.startswith("is/") for key in trainer._metrics["train"])  # the metrics block ran
