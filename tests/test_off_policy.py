"""Off-policy diagnostics (`off_policy_diagnostics=True`, `off_policy/*` metrics): hand-computed percentiles and
clipped counts, stock TRL's run to the bit with the diagnostics on, the logged values against the tensors they come
from, the update index over a rollout's reuse cycle, and with ACPO's bounds. Every run reuses its rollouts."""

import pytest
import torch
from test_grpo_trainer import _assert_same_run, _step_logs, _train
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.grpo.methods.clip_objective import ClipObjective
from trl_rlvr_ext.losses import (
    CLIPPED_HIGH_EDGES,
    CLIPPED_LOW_EDGES,
    RATIO_PERCENTILES,
    clipped_counts,
    clipped_ratio_histogram,
    ratio_percentiles,
)
from trl_rlvr_ext.losses.acpo import acpo_bin_index


def test_ratio_percentiles_hand_computed():
    values = torch.arange(1.0, 101.0)  # 1..100: linear interpolation, position q·99
    expected = [1 + 0.01 * 99, 1 + 0.1 * 99, 1 + 0.5 * 99, 1 + 0.9 * 99, 1 + 0.99 * 99]
    torch.testing.assert_close(ratio_percentiles(values), torch.tensor(expected))
    padded = torch.cat([values, torch.full((37,), float("nan"))])  # padding from other processes is ignored
    torch.testing.assert_close(ratio_percentiles(padded.reshape(1, -1)), torch.tensor(expected))
    assert ratio_percentiles(torch.tensor([float("nan")])).isnan().all()
    assert ratio_percentiles(torch.tensor([2.0]), (50,)).tolist() == [2.0]


def test_clipped_counts_hand_computed():
    probs = torch.tensor([[0.1, 0.1, 0.5, 0.9, 0.9, 0.9]])
    select = torch.tensor([[1, 1, 1, 1, 1, 0]])  # the last token (clipped) is not selected: not counted
    clipped_low = torch.tensor([[True, False, False, False, False, True]])
    clipped_high = torch.tensor([[False, False, True, True, False, False]])
    counts = clipped_counts(clipped_low, clipped_high, acpo_bin_index(probs, select, 3), 3)
    # bins [0, 1/3), [1/3, 2/3), [2/3, 1]; last column: all bins
    assert counts.tolist() == [[2, 1, 2, 5], [1, 0, 0, 1], [0, 1, 1, 2]]


def test_clipped_ratio_histogram_hand_computed():
    # low side, bound 0.5: r / 0.5 = 0.1, 0.5 (an edge: the upper bin), 0.6, 0.92, 0.98; one token not clipped
    ratio = torch.tensor([[0.05, 0.25, 0.3, 0.46, 0.49, 0.1]])
    clipped = torch.tensor([[True, True, True, True, True, False]])
    counts = clipped_ratio_histogram(ratio, clipped, 0.5, CLIPPED_LOW_EDGES)
    assert counts.tolist() == [1, 0, 2, 0, 2]
    # high side, per-token bounds (ACPO): r / bound = 1.05, 1.2, 3.0 (past the last finite edge), 1.5 (an edge)
    ratio = torch.tensor([[1.05, 2.4, 3.0, 3.0]])
    bound = torch.tensor([[1.0, 2.0, 1.0, 2.0]])
    counts = clipped_ratio_histogram(ratio, torch.ones_like(ratio, dtype=torch.bool), bound, CLIPPED_HIGH_EDGES)
    assert counts.tolist() == [1, 1, 0, 1, 1] and counts.dtype == torch.float64
    assert (
        clipped_ratio_histogram(ratio, torch.zeros_like(ratio, dtype=torch.bool), 1.28, CLIPPED_HIGH_EDGES).sum() == 0
    )


def _diag(**overrides):
    return {"off_policy_diagnostics": True, "steps_per_generation": 2, **overrides}


def test_diagnostics_leave_stock_trl_unchanged_and_log_what_they_measure(tiny_model_path, tmp_path):
    """The diagnostics run the copy of TRL's loss with TRL's own clip: every TRL metric, loss and parameter must be
    stock TRL's to the bit; each logged percentile and share must be the one of the tensors of that step; the update
    index runs over the rollout's 4 micro-steps (steps_per_generation 2 × num_iterations 2)."""
    options = {"steps_per_generation": 2}
    stock, _, stock_after = _train(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "stock", **options)

    seen = []
    original = ClipObjective.log_off_policy

    def recording(self, mode, diagnostics, masks):
        seen.append((diagnostics, masks))
        return original(self, mode, diagnostics, masks)

    ClipObjective.log_off_policy = recording
    try:
        ours, _, ours_after = _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "ours", **_diag())
    finally:
        ClipObjective.log_off_policy = original
    assert any(log["clip_ratio/region_mean"] > 0 for log in _step_logs(stock)), "clip never active: test is void"
    _assert_same_run(stock, ours, stock_after, ours_after, exclude_prefix="off_policy/")

    logs = _step_logs(ours)
    assert [log["off_policy/update_index"] for log in logs] == [0.0, 1.0, 2.0, 3.0]
    assert len(seen) == len(logs)  # one loss computation per logged step
    for log, (diagnostics, masks) in zip(logs, seen, strict=True):
        select = diagnostics["mask"].bool() & (diagnostics["advantages"] != 0)
        expected = ratio_percentiles(diagnostics["ratio"][select])
        assert [log[f"off_policy/ratio_p{p}"] for p in RATIO_PERCENTILES] == expected.tolist()
        high = (masks["clipped_high"] & select).sum().item() / select.sum().item()
        assert log["off_policy/clipped_high_frac"] == pytest.approx(high, rel=1e-12)
        # over the selected tokens only: at least TRL's share over all completion tokens
        assert log["off_policy/clipped_high_frac"] >= log["clip_ratio/high_mean"] - 1e-9
        assert log["off_policy/clipped_low_frac"] >= log["clip_ratio/low_mean"] - 1e-9
        values = [log[f"off_policy/ratio_p{p}"] for p in RATIO_PERCENTILES]
        assert values == sorted(values)
        # the histograms count exactly the selected clipped tokens, by r / bound
        for side, bound, edges in (("low", 0.8, CLIPPED_LOW_EDGES), ("high", 1.28, CLIPPED_HIGH_EDGES)):
            clipped = masks[f"clipped_{side}"] & select
            counts = [log[f"off_policy/clipped_{side}_hist{k}"] for k in range(len(edges) - 1)]
            assert counts == clipped_ratio_histogram(diagnostics["ratio"], clipped, bound, edges).tolist()
            assert sum(counts) == clipped.sum().item()
    assert max(log["off_policy/ratio_p99"] for log in logs) > 1.2  # the rollout was reused: ratios moved
    assert max(log["off_policy/clipped_high_frac"] + log["off_policy/clipped_low_frac"] for log in logs) > 0
    assert sum(log[f"off_policy/clipped_{side}_hist{k}"] for log in logs for side in ("low", "high") for k in range(5))


def test_diagnostics_with_acpo_count_against_acpos_bounds(tiny_model_path, tmp_path):
    trainer, _, _ = _train(
        RLVRGRPOTrainer,
        RLVRGRPOConfig,
        tiny_model_path,
        tmp_path,
        adaptive_clip="acpo",
        temperature=0.05,
        learning_rate=0.01,
        **_diag(),
    )
    logs = _step_logs(trainer)
    assert max(log["adaptive_clip/clip_ratio_high"] + log["adaptive_clip/clip_ratio_low"] for log in logs) > 0
    for log in logs:
        assert log["off_policy/clipped_high_frac"] >= log["adaptive_clip/clip_ratio_high"] - 1e-9
        assert log["off_policy/clipped_low_frac"] >= log["adaptive_clip/clip_ratio_low"] - 1e-9
        # the histograms count ACPO's clipped tokens (relative to its per-token bounds): some exactly when some are
        high = sum(log[f"off_policy/clipped_high_hist{k}"] for k in range(5))
        assert (high > 0) == (log["off_policy/clipped_high_frac"] > 0)
        bins = [k for k in range(5) if f"off_policy/ratio_p50_bin{k}" in log]
        assert bins and all(f"off_policy/clipped_high_frac_bin{k}" in log for k in bins)
    assert max(sum(f"off_policy/ratio_p50_bin{k}" in log for k in range(5)) for log in logs) >= 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"loss_type": "cispo"}, "off_policy_diagnostics measures the ratios"),
        ({"loss_type": "grpo", "importance_sampling_level": "sequence"}, "off_policy_diagnostics measures the ratios"),
        ({"adaptive_clip_num_bins": 0}, "off_policy_diagnostics bins tokens by adaptive_clip_num_bins"),
    ],
)
def test_config_rejects_diagnostics_without_a_token_level_clip(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(
            output_dir=str(tmp_path), use_cpu=True, report_to="none", off_policy_diagnostics=True, **overrides
        )
