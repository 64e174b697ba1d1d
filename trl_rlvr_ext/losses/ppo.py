"""PPO's clipped surrogate, as TRL's GRPO writes it, with scalar or per-token clip widths.

    objective = min(min(r, δ)·A, clip(r, 1 − ε_l, 1 + ε_h)·A)          (δ: INTELLECT-2's optional cap, TRL's `delta`)
    clipped_low  = (A < 0) & (r < 1 − ε_l)                              (PPO gives these tokens no gradient)
    clipped_high = (A > 0) & (r > 1 + ε_h)

ε_l and ε_h are floats (TRL's `epsilon`, `epsilon_high`) or tensors broadcastable against ``ratio`` (per-token widths,
e.g. ACPO's variance-adaptive bounds, `acpo_clip_bounds`).
"""

import torch


def ppo_clipped_objective(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float | torch.Tensor,
    epsilon_high: float | torch.Tensor,
    delta: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(objective to maximise, clipped_low, clipped_high)`` of PPO's clipped surrogate, element-wise.

    Written exactly as TRL's `_compute_loss` writes it (``torch.clamp`` of the ratio, then ``torch.min`` of the two
    products), so that with float widths each element equals TRL's to the bit, and with tensor widths equal to TRL's
    floats as well. The masks use the uncapped ratio, as TRL's ``clip_ratio/*`` metrics do.
    """
    lower, upper = 1.0 - epsilon_low, 1.0 + epsilon_high
    clipped_ratio = torch.clamp(ratio, lower, upper)
    capped_ratio = ratio if delta is None else torch.clamp(ratio, max=delta)
    objective = torch.min(capped_ratio * advantages, clipped_ratio * advantages)
    clipped_low = (ratio < lower) & (advantages < 0)
    clipped_high = (ratio > upper) & (advantages > 0)
    return objective, clipped_low, clipped_high
