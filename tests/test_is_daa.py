"""Exact tests of the IS-DAA importance weights (trl_rlvr_ext.losses.is_daa)."""

import math

import pytest
import torch

from trl_rlvr_ext.losses import is_daa_clip, is_daa_log_weights, is_daa_weight_stats, is_daa_weights


def _t(*values, requires_grad=False):
    return torch.tensor(values, dtype=torch.float32, requires_grad=requires_grad)


def test_hand_computed_weights_with_and_without_clip():
    # log w = (pc - bc) + (pr - br) per pair, by hand:
    #   pair 0: (-10 - -10) + (-12 - -12) = 0       -> w = 1
    #   pair 1: (-9  - -10) + (-12 - -12) = 1       -> w = e      (clipped to 2.0 below)
    #   pair 2: (-10 - -10) + (-13 - -12) = -1      -> w = 1/e    (no lower clip)
    #   pair 3: (-8  - -10) + (-11.5 - -12) = 2.5   -> w = e^2.5  (clipped)
    #   pair 4: (-11 - -10) + (-11 - -12) = 0       -> w = 1      (the two ratios cancel)
    pc = _t(-10.0, -9.0, -10.0, -8.0, -11.0)
    pr = _t(-12.0, -12.0, -13.0, -11.5, -11.0)
    bc = _t(-10.0, -10.0, -10.0, -10.0, -10.0)
    br = _t(-12.0, -12.0, -12.0, -12.0, -12.0)
    torch.testing.assert_close(is_daa_log_weights(pc, pr, bc, br), _t(0.0, 1.0, -1.0, 2.5, 0.0))
    unclipped = is_daa_weights(pc, pr, bc, br, weight_max=math.inf)
    torch.testing.assert_close(unclipped, _t(1.0, math.e, math.exp(-1), math.exp(2.5), 1.0))
    clipped = is_daa_weights(pc, pr, bc, br, weight_max=2.0)
    torch.testing.assert_close(clipped, _t(1.0, 2.0, math.exp(-1), 2.0, 1.0))
    # The paper's two caps: e^0.5 (authors' default, eps = 0.25) and e^2 (their released script, eps = 1.0)
    torch.testing.assert_close(
        is_daa_weights(pc, pr, bc, br, weight_max=math.exp(0.5)),
        _t(1.0, math.exp(0.5), math.exp(-1), math.exp(0.5), 1.0),
    )
    torch.testing.assert_close(
        is_daa_weights(pc, pr, bc, br, weight_max=math.exp(2.0)),
        _t(1.0, math.e, math.exp(-1), math.exp(2.0), 1.0),
    )


def test_floor_hand_computed():
    # log w = [0, ln 4, ln 0.5, -3, -1000, ln 0.01]; C = 2, F = 0.05:
    #   exp(min(log w, ln 2)) = [1, 2, 0.5, e^-3 ≈ 0.0498, 0 (float32 underflow), 0.01]
    #   max(·, 0.05)          = [1, 2, 0.5, 0.05, 0.05, 0.05]   (e^-3 = 0.049787 < 0.05: floored)
    log_weights = torch.log(_t(1.0, 4.0, 0.5)).tolist() + [-3.0, -1000.0, math.log(0.01)]
    log_weights = _t(*log_weights)
    assert is_daa_clip(log_weights, 2.0)[4].item() == 0.0  # the authors' weight: exactly 0
    torch.testing.assert_close(
        is_daa_clip(log_weights, 2.0, weight_floor=0.05), _t(1.0, 2.0, 0.5, 0.05, 0.05, 0.05), rtol=0, atol=0
    )
    stats = is_daa_weight_stats(log_weights, 2.0, weight_floor=0.05)
    assert stats["weight_mean"].item() == pytest.approx((1 + 2 + 0.5 + 3 * 0.05) / 6, rel=1e-6)
    assert stats["floored_frac"].item() == pytest.approx(3 / 6)
    assert stats["clipped_frac"].item() == pytest.approx(1 / 6)
    # ESS of the floored weights: (Σw)² / (n·Σw²) = 3.65² / (6 · (1 + 4 + 0.25 + 3 · 0.0025)) = 13.3225 / 31.545
    assert stats["ess"].item() == pytest.approx(13.3225 / 31.545, rel=1e-5)
    # The same through is_daa_weights: log w = (pc - bc) + (pr - br) = (-9 - -1) + (-2 - -2) = -8 -> e^-8 < 0.01
    assert is_daa_weights(_t(-9.0), _t(-2.0), _t(-1.0), _t(-2.0), 2.0, weight_floor=0.01).item() == pytest.approx(0.01)


def test_floor_zero_is_the_authors_weight_bit_for_bit():
    log_weights = torch.randn(64) * 30.0  # from e^-90 (and float32 underflow to 0) to e^+90
    log_weights[:3] = torch.tensor([-200.0, -104.0, math.log(2**-8)])
    # Re-typed from mail-research/AIS-Sampling4DAAs@34029a0, cli/train_is_dpo.py (the training loop's importance
    # ratio): exp(min(log w, 2·eps)), no lower clip; here 2·eps = log(1.5)
    authors = torch.exp(log_weights.clamp(max=math.log(1.5)))
    assert torch.equal(is_daa_clip(log_weights, 1.5), authors)
    assert torch.equal(is_daa_clip(log_weights, 1.5, weight_floor=0.0), authors)
    assert is_daa_weight_stats(log_weights, 1.5)["floored_frac"].item() == 0.0
    # The floor changes exactly the pairs below it, to exactly F
    floored = is_daa_clip(log_weights, 1.5, weight_floor=2**-8)
    below = authors < 2**-8
    assert below.any() and (~below).any()
    assert torch.equal(floored[~below], authors[~below]) and floored[below].eq(2**-8).all()
    assert is_daa_weight_stats(log_weights, 1.5, 2**-8)["floored_frac"].item() == pytest.approx(below.float().mean())


def test_weights_are_one_when_policy_equals_behaviour():
    logps = torch.randn(7) - 20.0
    other = torch.randn(7) - 25.0
    torch.testing.assert_close(is_daa_weights(logps, other, logps, other, weight_max=1.0), torch.ones(7))


def test_stop_gradient_no_gradient_flows_through_the_weight():
    pc = _t(-3.0, -1.0, -2.0, requires_grad=True)
    pr = _t(-4.0, -5.0, -1.0, requires_grad=True)
    bc, br = _t(-3.5, -3.0, -2.0), _t(-4.0, -4.0, -2.0)
    weights = is_daa_weights(pc, pr, bc, br, weight_max=2.0)
    assert not weights.requires_grad and weights.grad_fn is None
    # The gradient of w·ℓ is w·∇ℓ: with ℓ = -(pc - pr) (a toy per-pair loss), d/dpc = -w and d/dpr = +w exactly.
    loss = (weights * -(pc - pr)).sum()
    loss.backward()
    torch.testing.assert_close(pc.grad, -weights)
    torch.testing.assert_close(pr.grad, weights)
    # Same for the log weights and the clip
    assert not is_daa_log_weights(pc, pr, bc, br).requires_grad
    assert not is_daa_clip(pc * 2, 2.0).requires_grad


def test_weights_are_float32_for_bf16_log_probs():
    # bf16 policy sums against float32 behaviour sums: the difference is taken in float32 (bf16 spacing at 256 is 2).
    pc, pr = torch.tensor([-256.0], dtype=torch.bfloat16), torch.tensor([-2.0], dtype=torch.bfloat16)
    bc, br = torch.tensor([-255.5]), torch.tensor([-2.0])
    weights = is_daa_weights(pc, pr, bc, br, weight_max=2.0)
    assert weights.dtype == torch.float32
    torch.testing.assert_close(weights, torch.tensor([math.exp(-0.5)]))


def test_stats_hand_computed():
    # log w = [0, ln 4, ln 0.5, ln 16], C = 4 -> w = [1, 4, 0.5, 4]; the last pair is above the cap (ln 4 itself is
    # at the cap, not above it).
    log_weights = torch.log(_t(1.0, 4.0, 0.5, 16.0))
    stats = is_daa_weight_stats(log_weights, weight_max=4.0)
    assert stats["weight_mean"].item() == pytest.approx(9.5 / 4)
    assert stats["weight_max"].item() == pytest.approx(4.0)
    assert stats["clipped_frac"].item() == pytest.approx(0.25)
    # ESS = (Σw)² / (n·Σw²) = 9.5² / (4 · (1 + 16 + 0.25 + 16)) = 90.25 / 133
    assert stats["ess"].item() == pytest.approx(90.25 / 133.0, rel=1e-6)


def test_ess_bounds_and_underflow():
    assert is_daa_weight_stats(torch.zeros(5), 2.0)["ess"].item() == pytest.approx(1.0)
    # One pair carries all the weight: ESS -> 1/n
    one_hot = torch.tensor([0.0, -200.0, -200.0, -200.0])
    assert is_daa_weight_stats(one_hot, 2.0)["ess"].item() == pytest.approx(0.25)
    # Every weight underflows to 0 in exp: the ESS (scale invariant) is still 1 for equal weights, not 0/0
    tiny = torch.full((3,), -1000.0)
    assert is_daa_weights(tiny, tiny, torch.zeros(3), torch.zeros(3), 2.0).eq(0).all()
    assert is_daa_weight_stats(tiny, 2.0)["ess"].item() == pytest.approx(1.0)


def test_bad_inputs():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="one shape"):
        is_daa_log_weights(x, x, x, torch.zeros(4))
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="weight_max"):
            is_daa_weights(x, x, x, x, weight_max=bad)
    for bad in (-0.1, 2.5, float("nan")):  # F in [0, C]
        with pytest.raises(ValueError, match="weight_floor"):
            is_daa_clip(x, 2.0, weight_floor=bad)
