"""Exact tests of the NSR clip-recovery objective (trl_rlvr_ext.losses.clip_recovery_objective)."""

import math

import pytest
import torch

from trl_rlvr_ext.losses import clip_recovery_objective, nsr_expected_weight, nsr_rescue_probability


EPS_LOW, EPS_HIGH = 0.2, 0.28  # DAPO's clip, as in the paper


def _with_fixed_draws(monkeypatch, u):
    """Make NSR's uniform draw return ``u`` (hand-chosen), so the expected values can be computed by hand."""
    monkeypatch.setattr(torch, "rand", lambda shape, **kwargs: u.reshape(shape).to(kwargs.get("dtype")))


def test_nsr_hand_computed_values_and_gradients(monkeypatch):
    # columns: (r, A, u) -> hand-computed surrogate and d(surrogate)/dr
    cases = [
        (1.10, +1.0, 0.5, 1.10, 1.0),  # inside the trust region: r·A
        (1.50, +1.0, 0.8, 1.20, 0.8),  # clipped high, u·r = 1.2 <= 1.28 -> rescued: u·r·A, gradient u·A
        (1.50, +1.0, 0.9, 1.28, 0.0),  # clipped high, u·r = 1.35 > 1.28 -> stays clipped: (1+eps_h)·A, no gradient
        (0.50, -1.0, 0.6, -0.30, -0.6),  # clipped low, u = 0.6 <= r/(1-eps_l) = 0.625 -> rescued
        (0.50, -1.0, 0.7, -0.80, 0.0),  # clipped low, u = 0.7 > 0.625 -> stays clipped: (1-eps_l)·A
        (1.50, -1.0, 0.1, -1.50, -1.0),  # A < 0, r > 1+eps_h: PPO does not clip this side (min picks r·A)
        (0.50, +1.0, 0.1, 0.50, 1.0),  # A > 0, r < 1-eps_l: PPO does not clip this side
        (1.00, 0.0, 0.1, 0.00, 0.0),  # zero advantage
    ]
    ratio = torch.tensor([[c[0] for c in cases]], requires_grad=True)
    adv = torch.tensor([[c[1] for c in cases]])
    _with_fixed_draws(monkeypatch, torch.tensor([c[2] for c in cases]))
    objective, masks = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, mode="nsr")
    objective.sum().backward()
    torch.testing.assert_close(objective.detach()[0], torch.tensor([c[3] for c in cases]))
    torch.testing.assert_close(ratio.grad[0], torch.tensor([c[4] for c in cases]))
    assert masks["clipped_high"][0].tolist() == [False, True, True, False, False, False, False, False]
    assert masks["clipped_low"][0].tolist() == [False, False, False, True, True, False, False, False]
    assert masks["rescued_high"][0].tolist() == [False, True, False, False, False, False, False, False]
    assert masks["rescued_low"][0].tolist() == [False, False, False, True, False, False, False, False]


def test_nsr_expected_hand_computed_values_and_gradients():
    ratio = torch.tensor([[1.6, 0.4, 1.0, 1.6]], requires_grad=True)
    adv = torch.tensor([[2.0, -1.0, 1.0, -1.0]])
    objective, masks = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, mode="nsr_expected")
    objective.sum().backward()
    # upper: w = 1.28² / (2·1.6²) = 0.32 -> surrogate 0.32·1.6·2 = 1.024, gradient 0.32·2 = 0.64
    # lower: w = 0.4² / (2·0.8²) = 0.125 -> surrogate 0.125·0.4·(-1) = -0.05, gradient -0.125
    torch.testing.assert_close(objective.detach()[0], torch.tensor([1.024, -0.05, 1.0, -1.6]))
    torch.testing.assert_close(ratio.grad[0], torch.tensor([0.64, -0.125, 1.0, -1.0]))
    assert masks["rescued_high"].equal(masks["clipped_high"]) and masks["rescued_low"].equal(masks["clipped_low"])


def test_delta_caps_the_unclipped_ratio_like_trl():
    ratio = torch.tensor([[1.5, 3.0]], requires_grad=True)
    adv = torch.tensor([[-1.0, -1.0]])
    objective, _ = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, mode="nsr_expected", delta=1.4)
    objective.sum().backward()
    # min(min(r, δ)·A, clip(r)·A) = min(-1.4, -1.28) = -1.4, capped -> no gradient
    torch.testing.assert_close(objective.detach()[0], torch.tensor([-1.4, -1.4]))
    torch.testing.assert_close(ratio.grad[0], torch.tensor([0.0, 0.0]))


@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
def test_unrescued_elements_are_bit_identical_to_ppo(mode):
    torch.manual_seed(0)
    ratio = torch.exp(0.4 * torch.randn(16, 32))
    adv = torch.randn(16, 1)
    g = torch.Generator().manual_seed(1)
    objective, masks = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, mode=mode, generator=g)
    ppo = torch.min(ratio * adv, torch.clamp(ratio, 1 - EPS_LOW, 1 + EPS_HIGH) * adv)
    keep = ~(masks["rescued_low"] | masks["rescued_high"])
    assert objective.shape == ratio.shape
    assert torch.equal(objective[keep], ppo[keep])
    # and PPO's clipped set is exactly TRL's definition
    assert torch.equal(masks["clipped_high"], (ratio > 1 + EPS_HIGH) & (adv > 0))
    assert torch.equal(masks["clipped_low"], (ratio < 1 - EPS_LOW) & (adv < 0))
    assert masks["rescued_high"].any() and masks["rescued_low"].any()


@pytest.mark.parametrize(("side", "r", "adv"), [("high", 1.6, 1.0), ("high", 2.5, 0.7), ("low", 0.5, -1.0)])
def test_nsr_rescue_rate_and_mean_gradient_match_the_formulas(side, r, adv):
    """Statistical: over N draws, the rescue rate is (1+ε_h)/r (upper) or r/(1−ε_l) (lower), and the mean gradient
    of the surrogate w.r.t. r is the expected weight (1+ε_h)²/(2r²)·A or r²/(2(1−ε_l)²)·A. Tolerance: 5 sigma."""
    n = 200_000
    ratio = torch.full((n, 1), r, dtype=torch.float64, requires_grad=True)
    advantages = torch.full((n, 1), adv, dtype=torch.float64)
    g = torch.Generator().manual_seed(123)
    objective, masks = clip_recovery_objective(ratio, advantages, EPS_LOW, EPS_HIGH, mode="nsr", generator=g)
    objective.sum().backward()

    p = nsr_rescue_probability(torch.tensor(r), EPS_LOW, EPS_HIGH, side).item()
    p_expected = (1 + EPS_HIGH) / r if side == "high" else r / (1 - EPS_LOW)
    assert p == pytest.approx(p_expected)
    rate = masks[f"rescued_{side}"].double().mean().item()
    assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / n)

    w = nsr_expected_weight(torch.tensor(r), EPS_LOW, EPS_HIGH, side).item()
    w_expected = (1 + EPS_HIGH) ** 2 / (2 * r**2) if side == "high" else r**2 / (2 * (1 - EPS_LOW) ** 2)
    assert w == pytest.approx(w_expected)
    grads = ratio.grad[:, 0] / adv  # per-draw gradient weight: u if rescued else 0
    assert abs(grads.mean().item() - w) < 5 * grads.std().item() / math.sqrt(n)
    # the deterministic ablation gives exactly that expected gradient to every clipped element
    ratio.grad = None
    objective, _ = clip_recovery_objective(ratio, advantages, EPS_LOW, EPS_HIGH, mode="nsr_expected")
    objective.sum().backward()
    torch.testing.assert_close(ratio.grad, torch.full_like(ratio, w * adv))


def test_broadcasting_token_and_sequence_level():
    g = torch.Generator().manual_seed(0)
    ratio_tok, adv = torch.exp(torch.randn(4, 7, generator=g)), torch.randn(4, 1, generator=g)
    objective, masks = clip_recovery_objective(ratio_tok, adv, EPS_LOW, EPS_HIGH, generator=g)
    assert objective.shape == (4, 7) and all(m.shape == (4, 7) for m in masks.values())
    ratio_seq = torch.exp(torch.randn(4, 1, generator=g))
    objective, masks = clip_recovery_objective(ratio_seq, adv, EPS_LOW, EPS_HIGH, generator=g)
    assert objective.shape == (4, 1) and all(m.shape == (4, 1) for m in masks.values())


def test_dedicated_generator_is_reproducible_and_leaves_global_rng_alone():
    ratio = torch.exp(torch.randn(64, 16, generator=torch.Generator().manual_seed(0)))
    adv = torch.ones(64, 1)
    global_state = torch.get_rng_state()
    out_a, masks_a = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, generator=torch.Generator().manual_seed(7))
    out_b, masks_b = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), global_state)
    assert torch.equal(out_a, out_b) and torch.equal(masks_a["rescued_high"], masks_b["rescued_high"])
    out_c, _ = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, generator=torch.Generator().manual_seed(8))
    assert not torch.equal(out_a, out_c)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "soft"}, "mode='soft' is not supported"),
        ({"epsilon_low": 1.0}, "epsilon_low must be in"),
        ({"epsilon_high": -0.1}, "epsilon_high must be >= 0"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    args = {"epsilon_low": EPS_LOW, "epsilon_high": EPS_HIGH, **kwargs}
    with pytest.raises(ValueError, match=message):
        clip_recovery_objective(torch.ones(1, 1), torch.ones(1, 1), **args)


@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_ratios_give_finite_gradients_equal_to_ppo_on_unclipped_tokens(mode, dtype):
    """log r = ±50, ±100 with A > 0 and A < 0, differentiated w.r.t. log r as TRL does (r = exp(log r)).

    Each side's expected weight must be evaluated only where it applies: r²/(2(1−ε_l)²) at log r = 50 is inf in
    float32, and a torch.where over it backpropagated 0·inf = NaN into an unclipped token (A < 0, r ≫ 1). float32
    log r = +100 is left out: exp overflows to inf there and stock PPO's own gradient is then not finite either.
    """
    log_r = [-100.0, -50.0, 50.0, 100.0] if dtype == torch.float64 else [-100.0, -50.0, 50.0]
    cases = [(lr, a) for lr in log_r for a in (1.0, -1.0)]
    log_ratio = torch.tensor([[c[0] for c in cases]], dtype=dtype, requires_grad=True)
    adv = torch.tensor([[c[1] for c in cases]], dtype=dtype)
    ratio = torch.exp(log_ratio)
    assert torch.isfinite(ratio).all()
    g = torch.Generator().manual_seed(0)
    objective, masks = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, mode=mode, generator=g)
    objective.sum().backward()
    grad = log_ratio.grad.clone()
    assert torch.isfinite(objective).all() and torch.isfinite(grad).all()

    log_ratio.grad = None
    ratio = torch.exp(log_ratio)
    ppo = torch.min(ratio * adv, torch.clamp(ratio, 1 - EPS_LOW, 1 + EPS_HIGH) * adv)
    ppo.sum().backward()
    unclipped = ~(masks["clipped_low"] | masks["clipped_high"])
    assert unclipped.any() and (~unclipped).any()
    assert torch.equal(grad[unclipped], log_ratio.grad[unclipped])
    assert torch.equal(objective.detach()[unclipped], ppo.detach()[unclipped])
    if mode == "nsr_expected":
        # a clipped token's gradient w.r.t. log r is w·A·r: (1+ε_h)²/(2r)·A upper, r³/(2(1−ε_l)²)·A lower
        r = torch.exp(log_ratio.detach())
        expected = torch.where(r > 1, (1 + EPS_HIGH) ** 2 / (2 * r), r**3 / (2 * (1 - EPS_LOW) ** 2)) * adv
        torch.testing.assert_close(grad[~unclipped], expected[~unclipped])


@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
def test_float64_ratios_are_rescued_at_float64_precision(mode):
    # The rescue is computed at max(float32, the ratio's dtype): a float64 ratio must see float64 weights and a
    # float64 draw, not float32 ones (which put gradient errors of ~6e-8 against a float64 reference).
    r = torch.tensor([[1.5, 1.7, 3.3], [0.5, 0.3, 0.1], [1.1, 0.9, 1.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0], [-1.0], [0.7]], dtype=torch.float64)
    ratio = r.clone().requires_grad_(True)
    generator = torch.Generator().manual_seed(0)
    objective, masks = clip_recovery_objective(ratio, adv, EPS_LOW, EPS_HIGH, mode=mode, generator=generator)
    objective.sum().backward()

    upper, lower = 1.0 + EPS_HIGH, 1.0 - EPS_LOW
    clipped_high, clipped_low = (adv > 0) & (r > upper), (adv < 0) & (r < lower)
    if mode == "nsr":
        u = torch.rand(r.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        rescued_high, rescued_low = clipped_high & (u * r <= upper), clipped_low & (u <= r / lower)
        weight = u
    else:
        rescued_high, rescued_low = clipped_high, clipped_low
        weight = torch.where(clipped_high, upper**2 / (2 * r**2), r**2 / (2 * lower**2))
    rescued = rescued_high | rescued_low
    clipped = clipped_high | clipped_low
    expected_grad = torch.where(rescued, weight * adv, torch.where(clipped, 0.0, adv.expand_as(r)))
    assert torch.equal(masks["rescued_high"], rescued_high) and torch.equal(masks["rescued_low"], rescued_low)
    assert rescued.any()
    torch.testing.assert_close(ratio.grad, expected_grad, rtol=1e-14, atol=0.0)
