"""ACPO's variance-adaptive clip: per-token clip widths from the spread of the ratios at similar probabilities.

Paper: "What are Key Factors for Updates in RL for LLM Reasoning?", Wang et al., 2026,
https://arxiv.org/abs/2606.22570; the authors' code: https://github.com/Control-derek/ACPO (a verl fork),
`verl/trainer/ppo/core_algos.py::compute_variance_adaptive_cliprange`, called by `compute_policy_loss`.
This module follows that code (see docs/methods/acpo.md for where it and the paper's text part):

    bins      B_k = [k/K, (k+1)/K) for k < K−1, the last one closed: [(K−1)/K, 1]   (K = num_bins, over π_θ(token))
    σ_k       = sqrt(Var_k(r) + 1e-8)        Var_k: biased (1/n) variance of the ratios r of the masked tokens in B_k
    ε_k       = clamp(base + α·σ_k, min, max)
    clip      r ↦ clip(r, 1 − ε_k, 1 + ε_k) for every masked token in B_k (symmetric)

The ratio the bins read (and the loss clips) is the authors' exp(clamp(log π_θ − log π_old, −20, 20)): their
`compute_policy_loss` clamps the log-ratio before the exponential, so one token far off-policy cannot make its ratio
inf, which would make every bin's moments NaN (a matmul: inf · 0 = NaN). See `acpo_clamp_log_ratio`.

Tokens outside the mask (or whose probability is in no bin: NaN) keep ``base``, unclamped, as in the authors' code;
they take no part in the loss. The widths carry no gradient (the authors take the std with `.item()`).

The statistics travel as per-bin moments (count, Σr, Σr²) in float64, so that several processes (or micro-batches)
can sum them and all use the same bounds: pass ``reduce_moments`` (e.g. an all-reduce). Bins are assigned in float32
whatever the input dtype, with the authors' edges (``i * (1.0 / num_bins)``, compared in float32).
"""

from collections.abc import Callable
from typing import NamedTuple

import torch


ACPO_PAPER_SETTINGS = {"alpha": 3.0, "base": 0.2, "min_clip": 0.0, "max_clip": 3.0, "num_bins": 5}
# The authors' clamp of the log-ratio before the exponential (`compute_policy_loss`: "for stability"): e^±20.
ACPO_LOG_RATIO_LIMIT = 20.0


class AcpoBins(NamedTuple):
    """Per-bin statistics of ACPO and the per-token clip widths they give.

    Attributes:
        bound: per-token clip width ε (float32, shaped like the ratio): the clip is [1 − ε, 1 + ε].
        bin_index: per-token bin (int64, shaped like the ratio), −1 for tokens outside the mask or in no bin.
        count: tokens per bin (float64, ``(num_bins,)``), after ``reduce_moments``.
        ratio_std: σ_k = sqrt(Var_k(r) + 1e-8) per bin (float64), NaN for an empty bin.
        bin_bound: ε_k per bin (float64), NaN for an empty bin.
    """

    bound: torch.Tensor
    bin_index: torch.Tensor
    count: torch.Tensor
    ratio_std: torch.Tensor
    bin_bound: torch.Tensor


def _check_acpo_arguments(alpha, base, min_clip, max_clip, num_bins) -> None:
    if not isinstance(num_bins, int) or isinstance(num_bins, bool) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer (the paper uses 5 equal-width bins), got {num_bins!r}.")
    for name, value in (("alpha", alpha), ("base", base), ("min_clip", min_clip), ("max_clip", max_clip)):
        if not value >= 0:  # also refuses NaN
            raise ValueError(f"{name} must be a number >= 0, got {value!r} (paper: {ACPO_PAPER_SETTINGS[name]}).")
    if max_clip < min_clip:
        raise ValueError(
            f"max_clip ({max_clip}) must be >= min_clip ({min_clip}): the width is clamped to [min, max]."
        )


def acpo_clamp_log_ratio(log_ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(clamp(log_ratio, −20, 20), tokens it changed)``: the authors' clamp of the log-ratio, before the exponential.

    The authors' `compute_policy_loss` clamps log π_θ − log π_old to [−20, 20] and exponentiates the result: that
    one ratio feeds the bins' statistics and the clipped surrogate. Clamping the log-ratio (not the ratio) also keeps
    the gradient finite: exp's backward multiplies by its output, and inf · 0 is NaN. The clamped tokens have no
    gradient through the ratio (clamp's derivative is 0 outside the range), as in the authors' code.

    Returns:
        The clamped log-ratio (with the input's gradient inside the range) and a boolean tensor, without
        gradient, marking the tokens whose |log-ratio| exceeded 20 (NaN is not marked: it is not clamped either).
    """
    clamped = log_ratio.detach().abs() > ACPO_LOG_RATIO_LIMIT
    return torch.clamp(log_ratio, min=-ACPO_LOG_RATIO_LIMIT, max=ACPO_LOG_RATIO_LIMIT), clamped


def acpo_bin_index(probs: torch.Tensor, mask: torch.Tensor, num_bins: int = 5) -> torch.Tensor:
    """Bin of each token: k such that k/K <= p < (k+1)/K, the last bin closed at 1; −1 outside the mask or the bins.

    The edges are the authors' Python floats ``i * (1.0 / num_bins)``, compared with the float32 probabilities in
    float32 (as ``tensor >= python_float`` does), so every token lands in the authors' bin.
    """
    p = probs.detach().to(torch.float32)
    bin_width = 1.0 / num_bins
    edges = torch.tensor([i * bin_width for i in range(num_bins + 1)], dtype=torch.float32, device=p.device)
    # right=True: index = number of inner edges <= p, i.e. p in [e_k, e_{k+1}) goes to bin k
    index = torch.bucketize(p, edges[1:-1], right=True)
    valid = (p >= edges[0]) & (p <= edges[-1]) & mask.bool()
    return torch.where(valid, index, torch.full_like(index, -1))


def acpo_bin_moments(ratio: torch.Tensor, bin_index: torch.Tensor, num_bins: int = 5) -> torch.Tensor:
    """``(3, num_bins)`` float64 per-bin moments of the ratios: count, Σr, Σr² (tokens with bin −1 left out).

    Summing these over processes (or micro-batches) gives the moments of the union, from which `acpo_bin_bounds`
    computes the same bounds everywhere. Computed with plain reductions (no atomics), hence deterministic.
    """
    r = ratio.detach().to(torch.float32).to(torch.float64).reshape(-1)
    one_hot = (bin_index.reshape(-1, 1) == torch.arange(num_bins, device=r.device)).to(torch.float64)
    return torch.stack([one_hot.sum(0), r @ one_hot, (r * r) @ one_hot])


def acpo_bin_bounds(
    moments: torch.Tensor, alpha: float = 3.0, base: float = 0.2, min_clip: float = 0.0, max_clip: float = 3.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(σ_k, ε_k)`` per bin (float64) from summed moments; NaN for an empty bin.

    σ_k = sqrt(Var_k + 1e-8) with the biased variance Var_k = Σr²/n − (Σr/n)² (float64, clamped at 0 against rounding),
    ε_k = clamp(base + α·σ_k, min_clip, max_clip).
    """
    count, total, total_sq = moments.to(torch.float64)
    n = count.clamp(min=1.0)
    mean = total / n
    variance = (total_sq / n - mean * mean).clamp(min=0.0)
    std = torch.sqrt(variance + 1e-8)
    bound = (base + alpha * std).clamp(min=min_clip, max=max_clip)
    empty = count == 0
    nan = torch.full_like(std, float("nan"))
    return torch.where(empty, nan, std), torch.where(empty, nan, bound)


def acpo_bins(
    probs: torch.Tensor,
    ratio: torch.Tensor,
    mask: torch.Tensor,
    alpha: float = 3.0,
    base: float = 0.2,
    min_clip: float = 0.0,
    max_clip: float = 3.0,
    num_bins: int = 5,
    *,
    reduce_moments: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> AcpoBins:
    """ACPO's bins, their statistics and the per-token clip widths (see `acpo_clip_bounds` for the arguments).

    Args:
        reduce_moments: called on the ``(3, num_bins)`` float64 moments before the bounds are computed; it must
            return their sum over the places that share the bounds (e.g. an all-reduce over processes). ``None``:
            the bounds are this call's tokens' own.
    """
    _check_acpo_arguments(alpha, base, min_clip, max_clip, num_bins)
    if probs.shape != ratio.shape or mask.shape != ratio.shape:
        raise ValueError(
            f"probs {tuple(probs.shape)}, ratio {tuple(ratio.shape)} and mask {tuple(mask.shape)} must have the same "
            "shape: ACPO bins every token by its own probability (a sequence-level ratio has no token to bin)."
        )
    bin_index = acpo_bin_index(probs, mask, num_bins)
    moments = acpo_bin_moments(ratio, bin_index, num_bins)
    if reduce_moments is not None:
        moments = reduce_moments(moments)
    ratio_std, bin_bound = acpo_bin_bounds(moments, alpha, base, min_clip, max_clip)
    # Per-token lookup; the extra last entry (index −1) is `base`, which the authors' tensors start from.
    table = torch.cat([bin_bound, bin_bound.new_tensor([base])]).to(torch.float32)
    bound = table[bin_index]
    return AcpoBins(bound, bin_index, moments[0], ratio_std, bin_bound)


def acpo_clip_bounds(
    probs: torch.Tensor,
    ratio: torch.Tensor,
    mask: torch.Tensor,
    alpha: float = 3.0,
    base: float = 0.2,
    min_clip: float = 0.0,
    max_clip: float = 3.0,
    num_bins: int = 5,
    *,
    reduce_moments: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``(low, high)`` clip widths of ACPO's variance-adaptive clip: the clip is [1 − low, 1 + high].

    Tokens are binned by their current probability p = π_θ(token) into ``num_bins`` equal-width bins over [0, 1]
    (the last one closed); in bin k, ε_k = clamp(base + α·sqrt(Var_k(r) + 1e-8), min_clip, max_clip) with Var_k the
    biased variance of the ratios of the masked tokens in the bin. Both widths are ε_k (the clip is symmetric):
    ``low`` and ``high`` are the same tensor. Tokens outside ``mask`` get ``base``.

    Args:
        probs: current probabilities π_θ of the tokens, (B, T) (any float dtype; binned in float32).
        ratio: importance ratios r = π_θ / π_old, (B, T), from the clamped log-ratio (`acpo_clamp_log_ratio`); read
            detached, in float32 (moments in float64). An infinite ratio would make every bin's width NaN.
        mask: completion mask, (B, T); only its non-zero tokens enter the statistics.
        alpha: α, the weight of the std (paper: 3.0; the authors' code default is 1.0).
        base: the base width (paper: 0.2).
        min_clip: lower clamp of the width (paper: 0.0; code default 0.05).
        max_clip: upper clamp of the width (paper: 3.0; code default 0.5).
        num_bins: K, the number of equal-width probability bins (paper: 5).
        reduce_moments: see `acpo_bins`.

    Returns:
        ``(low, high)``, float32 tensors shaped like ``ratio``, without gradient.
    """
    bound = acpo_bins(
        probs, ratio, mask, alpha, base, min_clip, max_clip, num_bins, reduce_moments=reduce_moments
    ).bound
    return bound, bound
