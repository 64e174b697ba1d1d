"""Importance weights of IS-DAA for preference pairs (https://huggingface.co/papers/2506.08681).

IS-DAA ("Mitigating Reward Over-optimization in Direct Alignment Algorithms with Importance Sampling", Nguyen et al.,
NeurIPS 2025) multiplies the per-pair loss of an offline direct alignment algorithm (DPO, IPO, ...) by the importance
ratio between the current policy π_θ and the behaviour policy π_D that generated the pair, clipped from above:

    log w = sg( [log π_θ(y_w|x) − log π_D(y_w|x)] + [log π_θ(y_l|x) − log π_D(y_l|x)] )
    w     = exp( min(log w, log C) )
    L     = mean over pairs of  w · ℓ_DAA(pair)

with sequence log-probabilities as sums over the completion tokens, sg(·) the stop-gradient and C the upper clip.
The authors' code writes the clip as ``min(log w, 2·eps)`` with ``eps = 0.25`` by default (C = e^0.5 ≈ 1.65) and
uses ``eps = 1.0`` (C = e^2 ≈ 7.39) in its released training script; it has no lower clip and no normalisation.

This package adds an optional floor F ≤ 1 (``weight_floor``): ``w = max(exp(min(log w, log C)), F)``. With π_D the
reference policy, a large policy move drives every weight to 0 (exp underflows in float32 below log w ≈ −104), and
the loss, its gradient and learning with it; the floor keeps each pair at F times DPO's step at least. ``F = 0`` is
the authors' weight exactly.

Everything here is a pure tensor function: no trainer, no model.
"""

import math

import torch


def _check_weight_max(weight_max: float) -> float:
    weight_max = float(weight_max)
    if math.isnan(weight_max) or weight_max <= 0.0:
        raise ValueError(
            f"weight_max must be a positive ratio (the upper clip C of the importance weight), got {weight_max}. "
            "The paper's values are e^0.5 ≈ 1.6487 (authors' default) and e^2 ≈ 7.389 (their released script); "
            "use float('inf') for no clip."
        )
    return weight_max


def _check_weight_floor(weight_floor: float, weight_max: float) -> float:
    weight_floor = float(weight_floor)
    if math.isnan(weight_floor) or weight_floor < 0.0 or weight_floor > weight_max:
        raise ValueError(
            f"weight_floor must be a ratio in [0, weight_max={weight_max}] (the lower bound F of the clipped importance "
            f"weight), got {weight_floor}. 0 gives the authors' weight (no lower bound)."
        )
    return weight_floor


def is_daa_log_weights(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    behavior_chosen_logps: torch.Tensor,
    behavior_rejected_logps: torch.Tensor,
) -> torch.Tensor:
    """Unclipped log importance weights of preference pairs, detached, in float32.

    ``log w = (log π_θ(y_w) − log π_D(y_w)) + (log π_θ(y_l) − log π_D(y_l))``, where every argument is a tensor of
    shape ``(num_pairs,)`` holding sequence log-probabilities (sums over the completion tokens).
    """
    tensors = (policy_chosen_logps, policy_rejected_logps, behavior_chosen_logps, behavior_rejected_logps)
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ValueError(
            "is_daa_log_weights needs four tensors of one shape (num_pairs,), got shapes "
            f"{[tuple(t.shape) for t in tensors]} for (policy_chosen, policy_rejected, behavior_chosen, "
            "behavior_rejected)."
        )
    # Float32 before the differences: sequence sums of a few hundred tokens lose the ratio in bf16.
    pc, pr, bc, br = (t.detach().float() for t in tensors)
    return (pc - bc) + (pr - br)


def is_daa_clip(log_weights: torch.Tensor, weight_max: float, weight_floor: float = 0.0) -> torch.Tensor:
    """``max(exp(min(log w, log weight_max)), weight_floor)``: the clipped importance weights (detached).

    ``weight_floor=0`` (the default) is the authors' weight, bit for bit: no lower bound."""
    weight_max = _check_weight_max(weight_max)
    weight_floor = _check_weight_floor(weight_floor, weight_max)
    weights = torch.exp(log_weights.detach().clamp(max=math.log(weight_max)))
    # The floor is applied to the weight itself, not to log w, so that a floored pair weighs exactly F.
    return weights.clamp(min=weight_floor) if weight_floor > 0.0 else weights


def is_daa_weights(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    behavior_chosen_logps: torch.Tensor,
    behavior_rejected_logps: torch.Tensor,
    weight_max: float,
    weight_floor: float = 0.0,
) -> torch.Tensor:
    """The IS-DAA per-pair weights ``w = max(exp(min(log w, log weight_max)), weight_floor)``, detached (float32, shape
    ``(num_pairs,)``).

    Args:
        policy_chosen_logps (`torch.Tensor`):
            Sequence log-probabilities (token sums) of the chosen completions under the policy π_θ, shape
            ``(num_pairs,)``.
        policy_rejected_logps (`torch.Tensor`):
            The same for the rejected completions.
        behavior_chosen_logps (`torch.Tensor`):
            Sequence log-probabilities of the chosen completions under the behaviour policy π_D that generated the
            pairs (the reference policy when the pairs were sampled from the SFT model, the paper's setting).
        behavior_rejected_logps (`torch.Tensor`):
            The same for the rejected completions.
        weight_max (`float`):
            Upper clip C of the weight, in ratio units (C = e^0.5 in the authors' code by default, e^2 in their
            released script). ``float("inf")`` disables the clip.
        weight_floor (`float`, *optional*, defaults to `0.0`):
            Lower bound F of the clipped weight, in [0, weight_max]. 0 is the authors' weight (no lower bound);
            `ISDPOConfig.importance_weight_floor` defaults to 2^-8.

    The weights carry no gradient: they scale the gradient of the per-pair loss, they are not differentiated.

    Example:
    ```python
    >>> import torch
    >>> from trl_rlvr_ext.losses import is_daa_weights
    >>> is_daa_weights(torch.tensor([-1.0, -1.0]), torch.tensor([-2.0, -2.0]),
    ...                torch.tensor([-1.5, -3.0]), torch.tensor([-2.0, -2.0]), weight_max=2.0)
    tensor([1.6487, 2.0000])
    >>> is_daa_weights(torch.tensor([-9.0]), torch.tensor([-2.0]),
    ...                torch.tensor([-1.0]), torch.tensor([-2.0]), weight_max=2.0, weight_floor=0.01)
    tensor([0.0100])
    ```
    """
    log_weights = is_daa_log_weights(
        policy_chosen_logps, policy_rejected_logps, behavior_chosen_logps, behavior_rejected_logps
    )
    return is_daa_clip(log_weights, weight_max, weight_floor)


def is_daa_weight_stats(
    log_weights: torch.Tensor, weight_max: float, weight_floor: float = 0.0
) -> dict[str, torch.Tensor]:
    """Diagnostics of a batch of (unclipped) log importance weights, as 0-d float32 tensors.

    - ``weight_mean`` / ``weight_max``: mean and largest clipped (and floored) weight (1.0 while π_θ = π_D).
    - ``clipped_frac``: fraction of pairs whose weight hit the cap (log w > log C).
    - ``floored_frac``: fraction of pairs whose weight was raised to the floor F (w < F before the floor; 0 when
      F = 0).
    - ``ess``: effective sample size fraction (Σw)² / (n·Σw²) of the clipped (and floored) weights, in (0, 1]; 1 when
      all weights are equal, 1/n when one pair carries all the weight.
    """
    weight_max = _check_weight_max(weight_max)
    weight_floor = _check_weight_floor(weight_floor, weight_max)
    log_cap = math.log(weight_max)
    log_weights = log_weights.detach().float().reshape(-1)
    if log_weights.numel() == 0:
        nan = torch.tensor(float("nan"), device=log_weights.device)
        return {"weight_mean": nan, "weight_max": nan, "clipped_frac": nan, "floored_frac": nan, "ess": nan}
    capped = is_daa_clip(log_weights, weight_max)
    weights = is_daa_clip(log_weights, weight_max, weight_floor)  # the weights the loss uses, to the bit
    log_floor = math.log(weight_floor) if weight_floor > 0.0 else -math.inf
    clipped_log_weights = log_weights.clamp(min=log_floor, max=log_cap)
    # The ESS is scale invariant: compute it on w / max(w) so that tiny weights cannot underflow to 0/0.
    scaled = torch.exp(clipped_log_weights - clipped_log_weights.max())
    ess = scaled.sum() ** 2 / (scaled.numel() * (scaled**2).sum())
    return {
        "weight_mean": weights.mean(),
        "weight_max": weights.max(),
        "clipped_frac": (log_weights > log_cap).float().mean(),
        "floored_frac": (capped < weight_floor).float().mean(),  # raised by the floor (none when F = 0)
        "ess": ess,
    }
