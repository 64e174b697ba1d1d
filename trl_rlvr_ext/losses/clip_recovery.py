"""Stochastic clip recovery for PPO's clipped surrogate: Near-boundary Stochastic Rescue (NSR).

Paper: "Clipping Bottleneck: Stabilizing RLVR via Stochastic Recovery of Near-Boundary Signals",
https://huggingface.co/papers/2605.22703. The paper gives the properties of the rule but not the rule itself; the
rule below is a *reconstruction* consistent with every stated property (see docs/methods/nsr.md):

    upper side (A > 0, r > 1+ε_h):  rescued iff u·r ≤ 1+ε_h
    lower side (A < 0, r < 1−ε_l):  rescued iff u ≤ r/(1−ε_l)          (the mirror of the upper side through 1/r)
    rescued token's surrogate:       sg(u)·r·A                          (gradient u·A·∇r)
    other clipped tokens:            clip(r)·A, as in PPO               (no gradient)
    unclipped tokens:                min(r·A, clip(r)·A), unchanged

with u ~ U(0, 1) drawn once per element of the broadcast (token, or sequence at sequence level). In expectation a
clipped token keeps the gradient weight E[u·1{rescued}]: (1+ε_h)²/(2r²) on the upper side and r²/(2(1−ε_l)²) on the
lower side, a soft clip decaying like O(1/r²). ``mode="nsr_expected"`` applies exactly these weights without
sampling (the paper's deterministic ablation).
"""

import torch

from .ppo import ppo_clipped_objective


CLIP_RECOVERY_FUNCTION_MODES = ("nsr", "nsr_expected")


def nsr_rescue_probability(ratio: torch.Tensor, epsilon_low: float, epsilon_high: float, side: str) -> torch.Tensor:
    """P(rescued | clipped) under NSR: (1+ε_h)/r on the upper side, r/(1−ε_l) on the lower side (clamped to 1)."""
    if side == "high":
        return ((1.0 + epsilon_high) / ratio).clamp(max=1.0)
    if side == "low":
        return (ratio / (1.0 - epsilon_low)).clamp(max=1.0)
    raise ValueError(f"side must be 'high' or 'low', got {side!r}.")


def nsr_expected_weight(ratio: torch.Tensor, epsilon_low: float, epsilon_high: float, side: str) -> torch.Tensor:
    """E[u·1{rescued}] for a clipped token: (1+ε_h)²/(2r²) on the upper side, r²/(2(1−ε_l)²) on the lower side."""
    if side == "high":
        return (1.0 + epsilon_high) ** 2 / (2.0 * ratio**2)
    if side == "low":
        return ratio**2 / (2.0 * (1.0 - epsilon_low) ** 2)
    raise ValueError(f"side must be 'high' or 'low', got {side!r}.")


def _check_per_token_epsilons(ratio: torch.Tensor, epsilon_low, epsilon_high) -> None:
    for name, value in (("epsilon_low", epsilon_low), ("epsilon_high", epsilon_high)):
        value = torch.as_tensor(value)
        if not value.is_floating_point():
            raise ValueError(f"per-token {name} must be a floating-point tensor, got dtype {value.dtype}.")
        try:
            broadcast = torch.broadcast_shapes(value.shape, ratio.shape)
        except RuntimeError:
            broadcast = None
        if broadcast != ratio.shape:
            raise ValueError(
                f"per-token {name} of shape {tuple(value.shape)} does not broadcast to the ratio's shape "
                f"{tuple(ratio.shape)}."
            )
        if bool((value < 0).any()) or bool(value.isnan().any()):
            raise ValueError(
                f"every per-token {name} must be a number >= 0 (a clip width), got a negative or NaN one."
            )


def clip_recovery_objective(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float | torch.Tensor,
    epsilon_high: float | torch.Tensor,
    mode: str = "nsr",
    generator: torch.Generator | None = None,
    *,
    delta: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-element clipped surrogate with clip recovery; the objective to *maximise* (the loss is its negative).

    Args:
        ratio: importance ratio r = π_θ/π_old, differentiable; (B, T) at token level or (B, 1) at sequence level.
        advantages: A, broadcastable against ``ratio``: (B, 1) or (B, T).
        epsilon_low: ε_l, the lower clip width (the trust region is [1 − ε_l, 1 + ε_h]): a float in [0, 1), or a
            tensor of per-token widths broadcastable against ``ratio`` (ACPO's adaptive bounds, `acpo_clip_bounds`).
            A per-token width may be >= 1: that token's lower bound 1 − ε_l <= 0 is never crossed by a ratio, so it is
            never lower-clipped (nor rescued).
        epsilon_high: ε_h, the upper clip width (>= 0): a float or a tensor of per-token widths, as ``epsilon_low``.
        mode: ``"nsr"`` (sampled rescue) or ``"nsr_expected"`` (deterministic expected weights).
        generator: the ``torch.Generator`` NSR draws u from (on ``ratio``'s device); ``None`` uses the global RNG.
        delta: optional INTELLECT-2 upper cap on the unclipped ratio (TRL's ``delta``): unclipped tokens then give
            min(min(r, δ)·A, clip(r)·A), exactly as TRL composes it. Clipped-token masks use the uncapped ratio, as
            TRL's ``clip_ratio/*`` metrics do.

    Returns:
        ``(objective, masks)``: the objective has the broadcast shape of ``ratio`` and ``advantages``; ``masks`` holds
        boolean tensors of that shape: ``clipped_low``, ``clipped_high`` (PPO's clipped tokens: A < 0 and
        r < 1 − ε_l; A > 0 and r > 1 + ε_h) and ``rescued_low``, ``rescued_high`` (those that keep a gradient; with
        ``"nsr_expected"`` every clipped token keeps its expected weight, so rescued equals clipped).
    """
    if mode not in CLIP_RECOVERY_FUNCTION_MODES:
        raise ValueError(f"mode={mode!r} is not supported. Use one of {list(CLIP_RECOVERY_FUNCTION_MODES)}.")
    if torch.is_tensor(epsilon_low) or torch.is_tensor(epsilon_high):
        _check_per_token_epsilons(ratio, epsilon_low, epsilon_high)
    else:
        if not 0.0 <= epsilon_low < 1.0:
            raise ValueError(f"epsilon_low must be in [0, 1) so that 1 - epsilon_low > 0, got {epsilon_low}.")
        if epsilon_high < 0.0:
            raise ValueError(f"epsilon_high must be >= 0, got {epsilon_high}.")

    lower, upper = 1.0 - epsilon_low, 1.0 + epsilon_high
    # Stock PPO surrogate, written as TRL writes it so that unrescued elements are bit-identical to TRL's.
    objective, clipped_low, clipped_high = ppo_clipped_objective(ratio, advantages, epsilon_low, epsilon_high, delta)
    # The rescue rule and its weights in at least float32, at the ratio's own precision when higher: in bf16 (8
    # mantissa bits) u would take only 256 values in [0.5, 1) and r·u ≤ 1+ε_h would be decided on rounded products;
    # a float64 ratio rounded to float32 weights would see gradient errors of ~1e-7 (relative). TRL hands float32
    # ratios (its log-probs are float32 even for a bf16 model), for which this is the identity.
    compute_dtype = torch.promote_types(ratio.dtype, torch.float32)
    r = ratio.detach().to(compute_dtype)

    if mode == "nsr":
        shape = torch.broadcast_shapes(ratio.shape, advantages.shape)
        u = torch.rand(shape, generator=generator, device=ratio.device, dtype=compute_dtype)
        rescued_high = clipped_high & (u * r <= upper)
        rescued_low = clipped_low & (u <= r / lower)
        weight = u
    else:
        rescued_high, rescued_low = clipped_high, clipped_low
        # Each side's weight is evaluated only where it applies: its ratio is replaced by 1 elsewhere before the
        # formula (the double-where trick), and tokens on neither side get weight 0. Evaluating r²/(2(1−ε_l)²) on
        # every token overflows to inf for r ≳ e^44 in float32, and the outer torch.where below then backpropagates
        # 0·inf = NaN into tokens PPO leaves unclipped. On its own side each weight is at most 1/2.
        ones = torch.ones_like(r)
        weight_high = nsr_expected_weight(torch.where(clipped_high, r, ones), epsilon_low, epsilon_high, "high")
        weight_low = nsr_expected_weight(torch.where(clipped_low, r, ones), epsilon_low, epsilon_high, "low")
        weight = torch.where(clipped_high, weight_high, torch.where(clipped_low, weight_low, torch.zeros_like(r)))

    # A rescued element's surrogate is sg(w)·r·A: its gradient is w·A·∇r, where PPO's clip gives none.
    objective = torch.where(rescued_low | rescued_high, weight * ratio * advantages, objective)
    masks = {
        "clipped_low": clipped_low,
        "clipped_high": clipped_high,
        "rescued_low": rescued_low,
        "rescued_high": rescued_high,
    }
    return objective, masks
