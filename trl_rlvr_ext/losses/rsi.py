"""RSI-S: token selection by the relative surprisal index, RSI = surprisal / entropy, within an interval.

Paper: "Relative Surprisal Index" (Lv, Zheng, Zhang, Huang, Wang, Dong, Zhu, Chen; 2026),
https://arxiv.org/abs/2606.31575. No code has been released; only the abstract could be read. It says RSI "couples the
token's entropy with the probability of the selected token" and that RSI-S "retains tokens within a stable RSI
interval", filtering out "both redundant low-surprisal tokens and unstable high-surprisal tail tokens". For a sampled
token y_t with probability p_t under the policy's next-token distribution π(·|·) (at the sampling temperature):

    s_t   = −log p_t                         the token's surprisal
    H_t   = −Σ_v π(v|·) log π(v|·)           the entropy of the distribution it was drawn from
    RSI_t = s_t / H_t                        0 where H_t <= eps (a numerically deterministic position; our rule)
    keep  = mask ∧ (low <= RSI_t <= high)    an open side when its bound is None

Why this ratio (our derivation; the paper's "mild conditions" are unknown): with logits z, p = softmax(z) and k the
sampled token, ∂ ln H / ∂z_k = p_k (RSI − 1) and ∂ ln ‖∇_z log p_k‖ / ∂z_k = −p_k. So the ratio of the first-order
relative variations of the logit-gradient norm and of the entropy under a perturbation of the selected logit is
1 / (1 − RSI), a function of RSI alone (the abstract's sentence): RSI < 1 means reinforcing the token sharpens the
distribution, RSI > 1 flattens it, RSI = 1 leaves the entropy unchanged.

The interval is unknown (the abstract gives no values): `rsi_interval_mask` takes absolute bounds,
`rsi_quantile_bounds` turns quantiles of a pool of RSI values (e.g. every process's tokens, so that every process
selects with the same thresholds) into bounds. Everything here is detached float32: the selection carries no gradient.
"""

import math

import torch


# The RSI percentiles logged as `rsi/p{q}`
RSI_PERCENTILES = (10, 50, 90)
# The sums `rsi_selection_counts` returns, in order (summed over processes before dividing)
RSI_COUNT_NAMES = (
    "tokens",
    "kept",
    "dropped_low",
    "dropped_high",
    "pos_tokens",
    "pos_kept",
    "neg_tokens",
    "neg_kept",
    "rsi_sum",
    "kept_sequences",
    "sequences",
)


def relative_surprisal_index(
    per_token_logps: torch.Tensor, entropies: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """RSI_t = −log p_t / H_t per token, detached float32 of the shape of ``per_token_logps``.

    Args:
        per_token_logps: log-probability of each sampled token, ``(B, T)``.
        entropies: entropy of the distribution each token was sampled from, ``(B, T)``, same policy and temperature.
        mask: 1 on the completion tokens, ``(B, T)``.
        eps: where ``H_t <= eps`` (a numerically deterministic position) RSI is set to 0, so such a token counts as
            redundant low-surprisal (reinforcing a token with p ≈ 1 has a gradient of norm ≈ √2·(1 − p) ≈ 0).

    Returns:
        RSI, 0 outside the mask and where ``H_t <= eps``.
    """
    if per_token_logps.shape != entropies.shape or per_token_logps.shape != mask.shape:
        raise ValueError(
            f"per_token_logps {tuple(per_token_logps.shape)}, entropies {tuple(entropies.shape)} and mask "
            f"{tuple(mask.shape)} must have the same shape."
        )
    if not eps >= 0:  # also refuses NaN
        raise ValueError(f"eps must be >= 0, got {eps!r}.")
    surprisal = -per_token_logps.detach().float()
    entropy = entropies.detach().float()
    defined = (entropy > eps) & mask.bool()
    rsi = surprisal / torch.where(defined, entropy, torch.ones_like(entropy))
    return torch.where(defined, rsi, torch.zeros_like(rsi))


def _check_bounds(low, high, what: str) -> None:
    # Numbers given by a user are checked; tensor bounds come from `rsi_quantile_bounds` (ordered by construction) and
    # are not read back, so that a bound on an accelerator costs no synchronisation.
    low, high = (None if isinstance(v, torch.Tensor) else v for v in (low, high))
    for name, value in (("low", low), ("high", high)):
        if value is not None and math.isnan(float(value)):
            raise ValueError(f"the {what} bound {name} is NaN.")
    if low is not None and high is not None and float(low) > float(high):
        raise ValueError(f"the {what} interval is empty: low={float(low)} > high={float(high)}.")


def rsi_interval_mask(
    rsi: torch.Tensor,
    mask: torch.Tensor,
    low: float | torch.Tensor | None = None,
    high: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """RSI-S's selection: ``mask ∧ (low <= RSI <= high)`` as a bool tensor; a bound of ``None`` leaves its side open.

    Both bounds are inclusive, so that a quantile bound keeps the token it falls on (TRL's entropy mask keeps
    ``H >= threshold`` the same way). Number bounds must be ordered; tensor bounds (from `rsi_quantile_bounds`) are
    taken as they are."""
    _check_bounds(low, high, "RSI")
    keep = mask.bool()
    if low is not None:
        keep = keep & (rsi >= low)
    if high is not None:
        keep = keep & (rsi <= high)
    return keep


def rsi_quantile_bounds(
    pool: torch.Tensor, q_low: float | None = None, q_high: float | None = None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The RSI bounds at quantiles ``q_low`` and ``q_high`` of ``pool`` (1-D, the RSI of the tokens to select among;
    linear interpolation, as `torch.quantile` and TRL's `get_high_entropy_mask`). ``None`` stays ``None`` (an open
    side). An empty pool gives ``low = +inf`` and ``high = −inf`` for the sides asked for, so nothing is kept (TRL's
    entropy mask keeps nothing then too)."""
    _check_bounds(q_low, q_high, "quantile")
    for name, q in (("q_low", q_low), ("q_high", q_high)):
        if q is not None and not 0.0 <= q <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {q!r}.")
    pool = pool.detach().float().reshape(-1)
    if pool.numel() == 0:
        inf = torch.tensor(float("inf"), device=pool.device)
        return (None if q_low is None else inf), (None if q_high is None else -inf)
    low = None if q_low is None else torch.quantile(pool, q_low)
    high = None if q_high is None else torch.quantile(pool, q_high)
    return low, high


def rsi_selection_counts(
    rsi: torch.Tensor,
    keep: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    low: float | torch.Tensor | None = None,
    high: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Sums for RSI-S's metrics, float64 ``(len(RSI_COUNT_NAMES),)`` in the order of `RSI_COUNT_NAMES`: completion
    tokens, kept tokens, tokens dropped below ``low`` and above ``high``, tokens and kept tokens of the sequences with a
    positive and with a negative advantage, Σ RSI over the completion tokens, sequences with at least one kept token,
    sequences with at least one completion token. Sums, so that several processes can add them before dividing.

    ``advantages`` is ``(B,)`` (one per sequence) or ``(B, T)`` (per token)."""
    valid = mask.bool()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    advantages = advantages.expand_as(rsi)
    dropped_low = valid & (rsi < low) if low is not None else torch.zeros_like(valid)
    dropped_high = valid & (rsi > high) if high is not None else torch.zeros_like(valid)
    pos, neg = valid & (advantages > 0), valid & (advantages < 0)
    kept = keep.bool() & valid
    values = [
        valid.sum(),
        kept.sum(),
        dropped_low.sum(),
        dropped_high.sum(),
        pos.sum(),
        (kept & pos).sum(),
        neg.sum(),
        (kept & neg).sum(),
        (rsi.double() * valid).sum(),
        kept.any(dim=1).sum(),
        valid.any(dim=1).sum(),
    ]
    return torch.stack([torch.as_tensor(v, dtype=torch.float64, device=rsi.device) for v in values])
