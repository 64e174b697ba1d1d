"""ACPO's variance-adaptive clip (trl_rlvr_ext.losses.acpo_clip_bounds): hand-computed bins, and a line-by-line
re-implementation of the authors' `compute_variance_adaptive_cliprange` (Control-derek/ACPO@cfcd73d,
verl/trainer/ppo/core_algos.py) as the reference. Also: per-token clip widths in the NSR objective."""

import math

import pytest
import torch

from trl_rlvr_ext.losses import (
    acpo_bins,
    acpo_clamp_log_ratio,
    acpo_clip_bounds,
    clip_recovery_objective,
    ppo_clipped_objective,
)
from trl_rlvr_ext.testing import assert_matches_reference


def authors_reference(current_probs, ratio, response_mask, alpha, base, clip_min, clip_max, num_bins=5):
    """The authors' procedure, step by step, as their code does it (our own transcription, not their text):
    start every token at `base`; edges i * (1 / num_bins); bin i is [lo, hi), the last one [lo, hi]; for a non-empty
    bin, biased variance of the masked ratios, std = sqrt(var + 1e-8) in the tensors' dtype, then in Python floats
    width = max(min, min(max, base + alpha * std)), written to both the low and the high width."""
    low = torch.full_like(ratio, base)
    high = torch.full_like(ratio, base)
    width = 1.0 / num_bins
    for i in range(num_bins):
        lo, hi = i * width, (i + 1) * width
        if i == num_bins - 1:
            in_bin = (current_probs >= lo) & (current_probs <= hi) & response_mask.bool()
        else:
            in_bin = (current_probs >= lo) & (current_probs < hi) & response_mask.bool()
        if in_bin.sum() > 0:
            values = ratio[in_bin]
            var = torch.var(values, unbiased=False)
            std = torch.sqrt(var + 1e-8)
            clip = base + alpha * std.item()
            clip = max(clip_min, min(clip_max, clip))
            low[in_bin] = clip
            high[in_bin] = clip
    return low, high


PAPER = {"alpha": 3.0, "base": 0.2, "min_clip": 0.0, "max_clip": 3.0, "num_bins": 5}


def _reference(probs, ratio, mask, alpha, base, min_clip, max_clip, num_bins):
    return authors_reference(probs, ratio, mask, alpha, base, min_clip, max_clip, num_bins)


# ---------------------------------------------------------------- hand-computed bins
def _hand_case():
    # tokens: (p, r, in mask)
    tokens = [
        (0.05, 1.0, 1),  # bin 0
        (0.15, 1.2, 1),  # bin 0 -> mean 1.1, biased var 0.01
        (0.10, 5.0, 0),  # bin 0 range but masked out: not in the stats, keeps base
        (0.20, 1.3, 1),  # exactly on the edge 0.2: bin 1 (bins are [lo, hi)); alone -> var 0
        (0.80, 0.9, 1),  # bin 4
        (1.00, 1.1, 1),  # p = 1: bin 4 (the last bin is closed)
        (0.99, 1.0, 1),  # bin 4 -> var of (0.9, 1.1, 1.0) = 0.02 / 3
    ]  # bins 2 and 3 (p in [0.4, 0.8)) are empty
    probs = torch.tensor([[t[0] for t in tokens]])
    ratio = torch.tensor([[t[1] for t in tokens]])
    mask = torch.tensor([[t[2] for t in tokens]])
    return probs, ratio, mask


def test_hand_computed_bins_bounds_and_statistics():
    probs, ratio, mask = _hand_case()
    bins = acpo_bins(probs, ratio, mask, **PAPER)
    assert bins.bin_index.tolist() == [[0, 0, -1, 1, 4, 4, 4]]
    assert bins.count.tolist() == [2.0, 1.0, 0.0, 0.0, 3.0]
    std0, std1, std4 = math.sqrt(0.01 + 1e-8), math.sqrt(0.0 + 1e-8), math.sqrt(0.02 / 3 + 1e-8)
    torch.testing.assert_close(bins.ratio_std[[0, 1, 4]], torch.tensor([std0, std1, std4], dtype=torch.float64))
    assert bins.ratio_std[2:4].isnan().all() and bins.bin_bound[2:4].isnan().all()
    expected = [0.2 + 3 * std0, 0.2 + 3 * std1, 0.2 + 3 * std4]  # all inside [0, 3]: not clamped
    torch.testing.assert_close(bins.bin_bound[[0, 1, 4]], torch.tensor(expected, dtype=torch.float64))
    low, high = acpo_clip_bounds(probs, ratio, mask, **PAPER)
    per_token = [expected[0], expected[0], 0.2, expected[1], expected[2], expected[2], expected[2]]
    torch.testing.assert_close(low, torch.tensor([per_token]))
    assert torch.equal(low, high) and low.dtype == torch.float32 and low.shape == ratio.shape


def test_hand_computed_clamping():
    probs, ratio, mask = _hand_case()
    # min 0.3 lifts bin 1 (0.2003) to 0.3; max 0.4 cuts bin 0 (0.5) and bin 4 (0.445) to 0.4
    low, _ = acpo_clip_bounds(probs, ratio, mask, alpha=3.0, base=0.2, min_clip=0.3, max_clip=0.4)
    torch.testing.assert_close(low, torch.tensor([[0.4, 0.4, 0.2, 0.3, 0.4, 0.4, 0.4]]))  # masked: base, unclamped
    # alpha = 0: every non-empty bin gets base, clamped
    low, _ = acpo_clip_bounds(probs, ratio, mask, alpha=0.0, base=0.2, min_clip=0.25, max_clip=3.0)
    torch.testing.assert_close(low, torch.tensor([[0.25, 0.25, 0.2, 0.25, 0.25, 0.25, 0.25]]))


def test_no_token_in_any_bin_gives_base_everywhere():
    probs, ratio, _ = _hand_case()
    low, high = acpo_clip_bounds(probs, ratio, torch.zeros_like(ratio), **PAPER)
    assert torch.equal(low, torch.full_like(ratio, 0.2)) and torch.equal(high, low)


# ---------------------------------------------------------------- against the authors' procedure
def _random_batch(seed, shape=(6, 40), spread=0.3, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(shape, generator=g) ** 3  # skewed towards 0, like token probabilities of a sampled text
    edges = torch.tensor([0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0 / 3, 2.0 / 3, 0.1, 0.7])
    at_edge = torch.rand(shape, generator=g) < 0.15  # tokens exactly on bin edges (incl. 0 and 1)
    probs = torch.where(at_edge, edges[torch.randint(0, len(edges), shape, generator=g)], probs)
    ratio = torch.exp(spread * torch.randn(shape, generator=g))
    mask = (torch.rand(shape, generator=g) < 0.8).float()
    return probs.to(dtype), ratio.to(dtype), mask


@pytest.mark.parametrize(
    "settings",
    [
        PAPER,
        {"alpha": 1.0, "base": 0.2, "min_clip": 0.05, "max_clip": 0.5, "num_bins": 5},  # the code's defaults
        {"alpha": 2.0, "base": 0.1, "min_clip": 0.0, "max_clip": 3.0, "num_bins": 3},
        {"alpha": 3.0, "base": 0.2, "min_clip": 0.0, "max_clip": 3.0, "num_bins": 10},
        {"alpha": 3.0, "base": 0.2, "min_clip": 0.0, "max_clip": 3.0, "num_bins": 7},
        {"alpha": 5.0, "base": 0.3, "min_clip": 0.35, "max_clip": 0.6, "num_bins": 1},
    ],
    ids=["paper", "code-defaults", "3-bins", "10-bins", "7-bins", "1-bin-clamped"],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_the_authors_procedure(settings, seed):
    probs, ratio, mask = _random_batch(seed, spread=0.05 + 0.3 * seed)
    # the same bins exactly; the widths to float32 rounding (moments in float64 vs the authors' float32 torch.var)
    assert_matches_reference(acpo_clip_bounds, _reference, [((probs, ratio, mask), settings)], atol=2e-6, rtol=0)
    ref_low, _ = _reference(probs, ratio, mask, **settings)
    bins = acpo_bins(probs, ratio, mask, **settings)
    for k in range(settings["num_bins"]):  # one width per bin: the bins are the authors'
        members = bins.bin_index == k
        if members.any():
            assert ref_low[members].unique().numel() == 1


def authors_policy_widths(log_prob, old_log_prob, response_mask, alpha, base, min_clip, max_clip, num_bins=5):
    """The first lines of the authors' `compute_policy_loss` (Control-derek/ACPO @ cfcd73d,
    verl/trainer/ppo/core_algos.py), re-typed: the log-ratio is clamped to [-20, 20] *before* the exponential, and
    that ratio, with the current probabilities exp(log_prob), goes to `compute_variance_adaptive_cliprange`."""
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    return authors_reference(torch.exp(log_prob), ratio, response_mask, alpha, base, min_clip, max_clip, num_bins)


@pytest.mark.parametrize("settings", [PAPER, {**PAPER, "max_clip": 1e12}], ids=["paper", "unclamped-width"])
def test_an_overflowing_log_ratio_is_clamped_as_the_authors_do(settings):
    """One token with log-ratio +1000 (its ratio overflows to inf) and one with −1000: the widths of every bin stay
    finite and equal the authors' (who clamp the log-ratio at ±20 before exponentiating); the clamp marks exactly
    those two tokens. Without the clamp the inf ratio made every bin's moments NaN (the matmul's inf · 0)."""
    probs, ratio, mask = _random_batch(4)
    mask[0, :2] = 1.0
    log_prob = torch.log(probs.clamp(min=1e-6))
    old_log_prob = log_prob - torch.log(ratio)
    old_log_prob[0, 0] = log_prob[0, 0] - 1000.0  # π_θ / π_old = e^1000 = inf in float32
    old_log_prob[0, 1] = log_prob[0, 1] + 1000.0
    log_ratio = (log_prob - old_log_prob).requires_grad_()

    clamped_log_ratio, clamped = acpo_clamp_log_ratio(log_ratio)
    expected = torch.zeros_like(clamped)
    expected[0, :2] = True
    assert torch.equal(clamped, expected)
    bins = acpo_bins(torch.exp(log_prob), torch.exp(clamped_log_ratio), mask, **settings)
    ref_low, ref_high = authors_policy_widths(log_prob, old_log_prob, mask, **settings)
    assert torch.isfinite(bins.bin_bound[bins.count > 0]).all() and torch.isfinite(bins.bound).all()
    assert torch.equal(ref_low, ref_high)
    torch.testing.assert_close(bins.bound, ref_low, rtol=2e-6, atol=2e-6)
    # the bin holding the e^20 ratio is really wide (clamped to max_clip with the paper's settings)
    overflow_bin = bins.bin_index[0, 0]
    assert bins.bin_bound[overflow_bin] > 1.0
    # the clamped tokens carry no gradient through the ratio, and the others their exp's: nothing is NaN
    torch.exp(clamped_log_ratio).sum().backward()
    assert torch.isfinite(log_ratio.grad).all() and (log_ratio.grad[0, :2] == 0).all()
    # the failure the clamp removes: the unclamped ratio turns every bin's width into NaN
    unclamped = acpo_bins(torch.exp(log_prob), torch.exp(log_ratio.detach()), mask, **settings)
    assert torch.isnan(unclamped.bin_bound).all()


def test_the_clamp_leaves_log_ratios_within_20_untouched():
    log_ratio = torch.tensor([[-20.0, -19.5, 0.0, 3.25, 20.0], [20.001, -20.5, float("nan"), 1e-3, 7.0]])
    out, clamped = acpo_clamp_log_ratio(log_ratio)
    assert torch.equal(out[0], log_ratio[0]) and torch.equal(out[1, 3:], log_ratio[1, 3:])
    assert out[1, 0] == 20.0 and out[1, 1] == -20.0 and torch.isnan(out[1, 2])
    assert clamped.tolist() == [[False] * 5, [True, True, False, False, False]]


def test_empty_bins_and_masked_tokens_match_the_authors():
    probs, ratio, mask = _random_batch(3)
    probs = probs.clamp(max=0.39)  # bins 2, 3, 4 empty
    mask[0] = 0  # a fully masked row, with its extreme ratios
    ratio[0] = 50.0
    low, _ = acpo_clip_bounds(probs, ratio, mask, **PAPER)
    ref_low, _ = _reference(probs, ratio, mask, **PAPER)
    torch.testing.assert_close(low, ref_low, rtol=0, atol=2e-6)
    assert torch.equal(low[0], torch.full_like(low[0], 0.2))  # masked tokens keep base
    assert acpo_bins(probs, ratio, mask, **PAPER).count[2:].eq(0).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_computed_in_float32_whatever_the_input_dtype(dtype):
    probs, ratio, mask = _random_batch(4)
    probs, ratio = probs.to(dtype), ratio.to(dtype)
    low, high = acpo_clip_bounds(probs, ratio, mask, **PAPER)
    assert low.dtype == high.dtype == torch.float32
    # the reference on the same values cast to float32: the same bins and widths
    ref_low, _ = _reference(probs.float(), ratio.float(), mask, **PAPER)
    torch.testing.assert_close(low, ref_low, rtol=0, atol=2e-6)


def test_widths_carry_no_gradient():
    probs, ratio, mask = _random_batch(5)
    ratio.requires_grad_(True)
    low, high = acpo_clip_bounds(probs, ratio, mask, **PAPER)
    assert not low.requires_grad and not high.requires_grad


def test_summed_moments_give_the_bounds_of_the_union():
    """What the trainer does across processes: each part holds different tokens, the summed moments give every part
    the bounds of the union (here summed by hand; tests/test_distributed.py does it with an all-reduce)."""
    probs, ratio, mask = _random_batch(6, shape=(8, 30))
    parts = [(probs[:3], ratio[:3], mask[:3]), (probs[3:], ratio[3:], mask[3:])]
    moments = [acpo_bins(*part, **PAPER).count for part in parts]  # sanity: the parts really differ
    assert not torch.equal(moments[0], moments[1])
    from trl_rlvr_ext.losses.acpo import acpo_bin_index, acpo_bin_moments

    total = sum(acpo_bin_moments(r, acpo_bin_index(p, m)) for p, r, m in parts)
    union = acpo_bins(probs, ratio, mask, **PAPER)
    for (p, r, m), rows in zip(parts, (slice(0, 3), slice(3, 8)), strict=True):
        shared = acpo_bins(p, r, m, **PAPER, reduce_moments=lambda _local: total)
        # float64 sums in another order: equal to rounding far below float32's resolution
        torch.testing.assert_close(shared.bin_bound, union.bin_bound, rtol=1e-12, atol=0)
        assert torch.equal(shared.bound, union.bound[rows])  # the float32 widths the loss uses: the same
        alone = acpo_bins(p, r, m, **PAPER)
        assert not torch.equal(alone.bin_bound.nan_to_num(), union.bin_bound.nan_to_num())
    ref_low, _ = _reference(probs, ratio, mask, **PAPER)
    torch.testing.assert_close(union.bound, ref_low, rtol=0, atol=2e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_bins": 0}, "num_bins must be a positive integer"),
        ({"num_bins": 2.5}, "num_bins must be a positive integer"),
        ({"alpha": -1.0}, "alpha must be a number >= 0"),
        ({"base": float("nan")}, "base must be a number >= 0"),
        ({"min_clip": 0.5, "max_clip": 0.4}, r"max_clip \(0.4\) must be >= min_clip \(0.5\)"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    probs, ratio, mask = _hand_case()
    with pytest.raises(ValueError, match=message):
        acpo_clip_bounds(probs, ratio, mask, **{**PAPER, **kwargs})


def test_sequence_level_ratio_is_refused():
    probs, ratio, mask = _hand_case()
    with pytest.raises(ValueError, match="a sequence-level ratio has no token to bin"):
        acpo_clip_bounds(probs, ratio[:, :1], mask)


# ---------------------------------------------------------------- per-token widths in PPO's and NSR's objectives
def test_ppo_objective_with_per_token_widths_hand_computed():
    ratio = torch.tensor([[1.4, 1.4, 0.6, 0.6]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    eps = torch.tensor([[0.5, 0.2, 0.5, 0.2]])
    objective, clipped_low, clipped_high = ppo_clipped_objective(ratio, adv, eps, eps)
    objective.sum().backward()
    # 1.4 inside [0.5, 1.5] -> r·A; 1.4 > 1.2 -> 1.2·A; 0.6 inside -> r·A; 0.6 < 0.8 -> 0.8·A
    torch.testing.assert_close(objective.detach(), torch.tensor([[1.4, 1.2, -0.6, -0.8]]))
    torch.testing.assert_close(ratio.grad, torch.tensor([[1.0, 0.0, -1.0, 0.0]]))
    assert clipped_high.tolist() == [[False, True, False, False]]
    assert clipped_low.tolist() == [[False, False, False, True]]


@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
def test_nsr_with_constant_per_token_widths_equals_scalar_widths(mode):
    torch.manual_seed(0)
    log_ratio = (0.4 * torch.randn(16, 32)).requires_grad_(True)
    adv = torch.randn(16, 1)
    outputs = []
    for eps_low, eps_high in ((0.2, 0.28), (torch.full((16, 32), 0.2), torch.full((16, 32), 0.28))):
        log_ratio.grad = None
        g = torch.Generator().manual_seed(1)
        objective, masks = clip_recovery_objective(
            torch.exp(log_ratio), adv, eps_low, eps_high, mode=mode, generator=g
        )
        objective.sum().backward()
        outputs.append((objective.detach(), masks, log_ratio.grad.clone()))
    (obj_a, masks_a, grad_a), (obj_b, masks_b, grad_b) = outputs
    if mode == "nsr":
        assert torch.equal(obj_a, obj_b) and torch.equal(grad_a, grad_b)
    else:  # the expected weights' (1 ± ε)² is a Python double for a float ε, float32 for a tensor: ulps apart
        torch.testing.assert_close(obj_a, obj_b, rtol=1e-6, atol=0)
        torch.testing.assert_close(grad_a, grad_b, rtol=1e-6, atol=0)
    assert all(torch.equal(masks_a[k], masks_b[k]) for k in masks_a)
    assert masks_a["rescued_high"].any() and masks_a["rescued_low"].any()


def test_nsr_rescues_past_the_per_token_bound(monkeypatch):
    # two tokens with r = 1.5, A = +1, u = 0.9: width 0.5 -> inside, r·A; width 0.28 -> clipped, u·r = 1.35 > 1.28
    # -> not rescued; width 0.4 -> clipped, u·r = 1.35 <= 1.4 -> rescued, surrogate u·r·A = 1.35, gradient u·A = 0.9
    monkeypatch.setattr(torch, "rand", lambda shape, **kwargs: torch.full(shape, 0.9, dtype=kwargs.get("dtype")))
    ratio = torch.tensor([[1.5, 1.5, 1.5]], requires_grad=True)
    adv = torch.ones(1, 3)
    eps = torch.tensor([[0.5, 0.28, 0.4]])
    objective, masks = clip_recovery_objective(ratio, adv, eps, eps, mode="nsr")
    objective.sum().backward()
    torch.testing.assert_close(objective.detach(), torch.tensor([[1.5, 1.28, 1.35]]))
    torch.testing.assert_close(ratio.grad, torch.tensor([[1.0, 0.0, 0.9]]))
    assert masks["clipped_high"].tolist() == [[False, True, True]]
    assert masks["rescued_high"].tolist() == [[False, False, True]]


@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
def test_per_token_widths_of_one_or_more_switch_the_lower_clip_off(mode):
    """ACPO's width reaches 3: 1 − ε <= 0, which no ratio crosses. No lower clip, and every value finite."""
    log_ratio = torch.tensor([[-60.0, -3.0, -0.5, 0.0, 0.5, 3.0]], requires_grad=True)
    adv = -torch.ones(1, 6)
    eps = torch.tensor([[1.0, 3.0, 1.0, 2.0, 1.5, 3.0]])
    objective, masks = clip_recovery_objective(
        torch.exp(log_ratio), adv, eps, eps, mode=mode, generator=torch.Generator().manual_seed(0)
    )
    objective.sum().backward()
    assert not masks["clipped_low"].any() and not masks["rescued_low"].any()
    assert torch.isfinite(objective).all() and torch.isfinite(log_ratio.grad).all()
    torch.testing.assert_close(objective.detach(), -torch.exp(log_ratio.detach()))  # r·A for every token


@pytest.mark.parametrize(
    ("eps", "message"),
    [
        (torch.tensor([[-0.1]]), "must be a number >= 0"),
        (torch.tensor([[float("nan")]]), "must be a number >= 0"),
        (torch.ones(1, 3), "does not broadcast"),
        (torch.ones(1, 1, dtype=torch.int64), "floating-point tensor"),
    ],
)
def test_bad_per_token_widths_raise_clear_errors(eps, message):
    with pytest.raises(ValueError, match=message):
        clip_recovery_objective(torch.ones(1, 2), torch.ones(1, 1), eps, 0.2)
