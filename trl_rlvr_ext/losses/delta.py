"""DelTA's discriminative token weights: which tokens' gradients separate the good answers from the bad ones.

Paper: "DelTA: Discriminative Token Credit Assignment for RLVR", 2026, https://arxiv.org/abs/2605.21467; the authors'
code: https://github.com/RUCBM/DelTA (a verl fork), `verl-DelTA/verl/workers/actor/dp_actor.py::compute_log_prob_h`
(implementation "Normal", the one the released script `recipe/dapo/srcs/run_DelTA.sh` selects). This module follows
that code (docs/methods/delta.md lists where it and the paper's text part):

    v_t        = (1 − p_t)·h_t          p_t: the sampled token's probability (at the sampling temperature), h_t: the
                                        hidden state entering the LM head; v_t is (up to sign) the LM-head gradient
                                        direction of the token's log-prob, projected on h
    μ⁺, μ⁻     = Σ A⁺·v / Σ A⁺,  Σ A⁻·v / Σ A⁻      A⁺ = max(A, 0), A⁻ = max(−A, 0), over the masked tokens
    m_t        = ‖v_t − μ⁻‖² − ‖v_t − μ⁺‖²          (a positive-advantage token's margin; a negative one's is −m_t)
    γ⁺, γ⁻     = sqrt(max(Var(margin), 1e-8))      population variance over the masked tokens of that side
    refine K×  μ^± ← Σ σ(±m/γ^±)·A^±·v / Σ σ(±m/γ^±)·A^±;  γ^± ← the spread of the margins that step used
    weight     = w_lo + (w_hi − w_lo)·σ(±m/γ^±) on the positive / negative sequences, w_lo on zero-advantage ones
    renorm     weight ← weight · N / Σ weight       N: masked tokens, so the weights average 1 over the mask

The trainer multiplies each token's advantage by its weight. Everything is float32 and carries no gradient (the
authors compute it under `torch.no_grad()` from detached hidden states). The distance is plain Euclidean: the authors
compute a per-dimension variance normaliser and then overwrite it with ones (`d = torch.ones_like(mu_pos)`).
The clamps are the authors': token counts at least 1, advantage sums at least 1e-8 (so a side with no tokens has a
zero centroid, and its tokens, if any, none), the weight sum at least 1e-8.
"""

from typing import NamedTuple

import torch


# The released script's values (recipe/dapo/srcs/run_DelTA.sh: delta_K=1, delta_lam_min=0.8, delta_lam_max=1.2)
DELTA_PAPER_SETTINGS = {"w_lo": 0.8, "w_hi": 1.2, "refine_steps": 1}
_EPS = 1e-8  # the authors' eps: advantage-sum clamp and the margin variance floor


class DeltaWeights(NamedTuple):
    """DelTA's token weights and the statistics they come from.

    Attributes:
        weights: per-token weight (float32, ``(B, T)``), zero outside the mask, averaging 1 over the mask.
        margin: per-token margin ‖v − μ⁻‖² − ‖v − μ⁺‖² against the final centroids (float32, ``(B, T)``); a
            positive-advantage token's weight grows with it, a negative one's shrinks.
        mu_pos: final centroid of the positive-advantage tokens (float32, ``(H,)``); zero if there are none.
        mu_neg: final centroid of the negative-advantage tokens (float32, ``(H,)``); zero if there are none.
        gamma_pos: the sigmoid temperature of the positive side (float32 scalar).
        gamma_neg: the sigmoid temperature of the negative side (float32 scalar).
    """

    weights: torch.Tensor
    margin: torch.Tensor
    mu_pos: torch.Tensor
    mu_neg: torch.Tensor
    gamma_pos: torch.Tensor
    gamma_neg: torch.Tensor


def _centroid(weight: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # Σ w·v / max(Σ w, eps): a side with no weight gets the zero vector, as in the authors' code
    return (weight.unsqueeze(-1) * v).sum(dim=(0, 1)) / weight.sum().clamp(min=_EPS)


def _margin(v: torch.Tensor, mu_pos: torch.Tensor, mu_neg: torch.Tensor) -> torch.Tensor:
    d_pos = ((v - mu_pos) ** 2).sum(dim=-1)
    d_neg = ((v - mu_neg) ** 2).sum(dim=-1)
    return d_neg - d_pos


def _spread(margin: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    # population std of the selected margins, from the first two moments, floored at sqrt(1e-8) (authors' clamps)
    count = select.sum().clamp(min=1.0)
    mean = (margin * select).sum() / count
    return torch.sqrt(torch.clamp((margin**2 * select).sum() / count - mean**2, min=_EPS))


def _check_delta_arguments(w_lo, w_hi, refine_steps) -> None:
    if not 0 <= w_lo <= w_hi:  # also refuses NaN
        raise ValueError(
            f"DelTA needs 0 <= w_lo <= w_hi (the weight range before renormalisation), got w_lo={w_lo!r}, "
            f"w_hi={w_hi!r} (released script: 0.8, 1.2)."
        )
    if not isinstance(refine_steps, int) or isinstance(refine_steps, bool) or refine_steps < 0:
        raise ValueError(f"refine_steps must be an integer >= 0 (released script: 1), got {refine_steps!r}.")


@torch.no_grad()
def delta_token_weights(
    hidden: torch.Tensor,
    logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    w_lo: float = DELTA_PAPER_SETTINGS["w_lo"],
    w_hi: float = DELTA_PAPER_SETTINGS["w_hi"],
    refine_steps: int = DELTA_PAPER_SETTINGS["refine_steps"],
) -> DeltaWeights:
    """DelTA's per-token advantage weights (see the module docstring for the equations).

    Args:
        hidden: ``(B, T, H)`` hidden states entering the LM head at the positions that predict each completion token.
        logps: ``(B, T)`` log-probabilities of the sampled tokens, at the sampling temperature.
        advantages: ``(B,)`` or ``(B, 1)`` sequence advantages (the authors read the first token's, ``adv[:, 0]``).
        mask: ``(B, T)`` the completion tokens that take part (1) or not (0).
        w_lo, w_hi: the weight range before renormalisation (released script: 0.8, 1.2).
        refine_steps: refinements of the centroids by the sigmoid posteriors (released script: K = 1).

    Returns:
        [`DeltaWeights`], float32, without gradient.
    """
    _check_delta_arguments(w_lo, w_hi, refine_steps)
    if advantages.dim() == 2:
        if advantages.shape[1] != 1:
            raise ValueError(
                f"advantages must be one per sequence, (B,) or (B, 1), got shape {tuple(advantages.shape)}: DelTA "
                "splits the tokens by the sign of their sequence's advantage."
            )
        advantages = advantages[:, 0]
    h = hidden.detach().float()
    m = mask.detach().float()
    a = advantages.detach().float()
    v = (1.0 - torch.exp(logps.detach().float())).unsqueeze(-1) * h  # [B, T, H]
    a_pos = a.clamp(min=0.0).unsqueeze(1) * m  # advantage mass of each token, per side
    a_neg = (-a).clamp(min=0.0).unsqueeze(1) * m
    pos = (a > 0).float().unsqueeze(1) * m  # the tokens of each side
    neg = (a < 0).float().unsqueeze(1) * m

    mu_pos, mu_neg = _centroid(a_pos, v), _centroid(a_neg, v)
    margin = _margin(v, mu_pos, mu_neg)
    gamma_pos, gamma_neg = _spread(margin, pos), _spread(-margin, neg)
    for _ in range(refine_steps):
        # New centroids weighted by each token's posterior; the temperatures come from the margins this step used
        # (against the centroids it started from), as in the authors' loop.
        mu_pos_next = _centroid(torch.sigmoid(margin / gamma_pos) * a_pos * pos, v)
        mu_neg_next = _centroid(torch.sigmoid(-margin / gamma_neg) * a_neg * neg, v)
        gamma_pos, gamma_neg = _spread(margin, pos), _spread(-margin, neg)
        mu_pos, mu_neg = mu_pos_next, mu_neg_next
        margin = _margin(v, mu_pos, mu_neg)

    w_pos = w_lo + (w_hi - w_lo) * torch.sigmoid(margin / gamma_pos)
    w_neg = w_lo + (w_hi - w_lo) * torch.sigmoid(-margin / gamma_neg)
    zero = 1.0 - (a > 0).float() - (a < 0).float()  # zero-advantage sequences: w_lo (they only enter the renorm)
    weights = (w_pos * pos + w_neg * neg + w_lo * zero.unsqueeze(1) * m) * m
    weights = weights * (m.sum() / weights.sum().clamp(min=_EPS))
    return DeltaWeights(weights, margin, mu_pos, mu_neg, gamma_pos, gamma_neg)


def delta_weight_stats(result: DeltaWeights, mask: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Summary of the weights for logging, float32 ``(6,)``: mean, min, max and population std over the masked tokens,
    then the fractions of the masked tokens with a non-zero advantage whose posterior σ(±m/γ) is at most 0.05 (weight
    at the low end of the range) or at least 0.95 (high end). NaN where the selection is empty."""
    if advantages.dim() == 2:
        advantages = advantages[:, 0]
    m = mask.detach().bool()
    w = result.weights[m]
    signed = (advantages.detach().float().unsqueeze(1).sign() * result.margin).expand_as(result.margin)
    gamma = torch.where(advantages.detach().unsqueeze(1) > 0, result.gamma_pos, result.gamma_neg)
    posterior = torch.sigmoid(signed / gamma)[m & (advantages.detach().unsqueeze(1) != 0)]
    nan = torch.tensor(float("nan"), device=w.device)
    if w.numel() == 0:
        return nan.repeat(6)
    fracs = (
        torch.stack([(posterior <= 0.05).float().mean(), (posterior >= 0.95).float().mean()])
        if posterior.numel()
        else nan.repeat(2)
    )
    return torch.cat([torch.stack([w.mean(), w.min(), w.max(), w.std(correction=0)]), fracs])
