"""Two CPU processes (torchrun, gloo): with adaptive_clip_scope="global" both ranks clip with the same ACPO bounds while
holding different tokens, equal to one process's bounds over the union of their tokens; with "micro_batch" (the
authors' behaviour) each rank's bounds are its own tokens'."""

import pytest
import torch
from test_distributed import run_torchrun

from trl_rlvr_ext.losses import acpo_bins


def _load(tmp_path, scope):
    ranks = [torch.load(tmp_path / f"{scope}_rank{k}.pt", weights_only=False) for k in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert len(ranks[0]["calls"]) == len(ranks[1]["calls"]) == 4  # one loss computation per step, 4 steps
    assert ranks[0]["param_sum"] == ranks[1]["param_sum"]  # DDP kept the replicas identical
    clipped = [log["adaptive_clip/clip_ratio_low"] + log["adaptive_clip/clip_ratio_high"] for log in ranks[0]["logs"]]
    assert max(clipped) > 0, "ACPO's clip never bound: the test is void"
    return ranks


def _union(calls):
    """One process's ACPO over both ranks' tokens (flattened: the ranks' completions may differ in length)."""
    flat = {key: torch.cat([c[key].reshape(1, -1) for c in calls], dim=1) for key in ("probs", "ratio", "mask")}
    return acpo_bins(flat["probs"], flat["ratio"], flat["mask"])


@pytest.mark.distributed
def test_acpo_bounds_across_two_processes(tiny_model_path, tmp_path):
    run_torchrun("acpo_ddp.py", tiny_model_path, str(tmp_path), timeout=600)

    ranks = _load(tmp_path, "global")
    moved = 0
    for call0, call1 in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        assert not torch.equal(call0["probs"], call1["probs"])  # the ranks hold different tokens
        torch.testing.assert_close(call0["bin_bound"], call1["bin_bound"], rtol=0, atol=0, equal_nan=True)
        union = _union([call0, call1])
        torch.testing.assert_close(call0["bin_bound"], union.bin_bound, rtol=1e-12, atol=0, equal_nan=True)
        n0 = call0["ratio"].numel()
        assert torch.equal(call0["bound"].reshape(-1), union.bound[0, :n0])
        assert torch.equal(call1["bound"].reshape(-1), union.bound[0, n0:])
        alone = acpo_bins(call0["probs"], call0["ratio"], call0["mask"])
        moved += not torch.equal(alone.bin_bound.nan_to_num(), union.bin_bound.nan_to_num())
    assert moved > 0, "rank 0's own bounds always equalled the union's: the all-reduce is not shown to matter"
    for log0, log1 in zip(ranks[0]["logs"], ranks[1]["logs"], strict=True):
        for prefix in ("adaptive_clip/", "off_policy/"):  # the same ACPO metrics and diagnostics on both ranks
            ours0 = {k: v for k, v in log0.items() if k.startswith(prefix)}
            assert ours0 and ours0 == {k: v for k, v in log1.items() if k.startswith(prefix)}, prefix
    # the diagnostics' percentiles are those of both ranks' tokens with a non-zero advantage, pooled
    from trl_rlvr_ext.losses import ratio_percentiles

    for log, call0, call1 in zip(ranks[0]["logs"], ranks[0]["calls"], ranks[1]["calls"], strict=True):
        assert log["off_policy/ratio_p50"] == pytest.approx(
            ratio_percentiles(torch.cat([c["ratio"][c["select"]] for c in (call0, call1)]), (50,)).item(), rel=1e-6
        )

    ranks = _load(tmp_path, "micro_batch")
    differ = 0
    for call0, call1 in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        for call in (call0, call1):  # each rank's bounds are its own tokens', to the bit
            alone = acpo_bins(call["probs"], call["ratio"], call["mask"])
            assert torch.equal(call["bound"], alone.bound)
        differ += not torch.equal(call0["bin_bound"].nan_to_num(), call1["bin_bound"].nan_to_num())
    assert differ > 0, "the ranks' per-micro-batch bounds never differed: the scope is not shown to act"
