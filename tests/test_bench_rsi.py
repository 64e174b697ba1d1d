"""bench/rsi_overhead.py's arms run on the tiny model: the loss path of each is timed against stock, and the arms
really select (the loss-path trainer switches its options per call, so an arm left off would time stock TRL)."""

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import grpo_overhead
import rsi_overhead


def test_rsi_arms_time_the_selection(tiny_model_path, tmp_path, monkeypatch):
    """RSI-S's own hook runs in its arms (the trainer's methods are built per arm: its options alone would not call it)."""
    from trl_rlvr_ext.grpo.methods.rsi import RSISelection

    calls = []
    original = RSISelection.token_mask

    def counting(self, *args, **kwargs):
        calls.append(self.args.rsi_selection)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RSISelection, "token_mask", counting)
    result = grpo_overhead.loss_path_ratios(
        tiny_model_path, str(tmp_path), 1, rsi_overhead.ARMS, batch=8, completion_length=4
    )
    assert set(result["ratios"]) == {"rsi", "rsi_quantile"} and all(r > 0 for r in result["ratios"].values())
    assert {"interval", "quantile"} <= set(calls)  # both arms selected
