"""Two CPU processes (torchrun, gloo): with rsi_selection="quantile" both ranks select with the same RSI bounds while
holding different tokens, the quantiles of the union of their tokens (as TRL's entropy mask gathers its entropies)."""

import pytest
import torch
from test_distributed import run_torchrun

from trl_rlvr_ext.losses import rsi_interval_mask, rsi_quantile_bounds


@pytest.mark.distributed
def test_rsi_quantile_bounds_are_global_across_two_processes(tiny_model_path, tmp_path):
    run_torchrun("rsi_ddp.py", tiny_model_path, str(tmp_path), timeout=600)
    ranks = [torch.load(tmp_path / f"rank{k}.pt", weights_only=False) for k in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert len(ranks[0]["calls"]) == len(ranks[1]["calls"]) == 4  # one loss computation per step, 4 steps
    assert ranks[0]["param_sum"] == ranks[1]["param_sum"]  # DDP kept the replicas identical
    moved = 0
    for call0, call1 in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        assert not torch.equal(call0["rsi"], call1["rsi"])  # the ranks hold different tokens
        assert (call0["low"], call0["high"]) == (call1["low"], call1["high"])
        union = torch.cat([c["rsi"][c["mask"].bool()] for c in (call0, call1)])
        low, high = rsi_quantile_bounds(union, 0.2, 0.8)
        assert (call0["low"], call0["high"]) == (low.item(), high.item())
        for call in (call0, call1):  # each rank keeps its own tokens inside the global bounds
            assert torch.equal(call["keep"], rsi_interval_mask(call["rsi"], call["mask"], low, high))
        alone = rsi_quantile_bounds(call0["rsi"][call0["mask"].bool()], 0.2, 0.8)
        moved += (alone[0].item(), alone[1].item()) != (low.item(), high.item())
    assert moved > 0, "rank 0's own bounds always equalled the union's: the gather is not shown to matter"
    for log0, log1 in zip(ranks[0]["logs"], ranks[1]["logs"], strict=True):
        ours0 = {k: v for k, v in log0.items() if k.startswith("rsi/")}
        assert ours0 and ours0 == {k: v for k, v in log1.items() if k.startswith("rsi/")}
