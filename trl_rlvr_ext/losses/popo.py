"""POPO's positive-only loss: softmax weights over the correct rollouts, their weighted NLL, a BYOL-style similarity
to an EMA target, and an entropy bonus.

Paper: "POPO: Positive-Only Policy Optimization", 2026, https://arxiv.org/abs/2605.06650; the authors' code:
https://github.com/momo1443/colm2026-POPO (a TRL `GRPOTrainer` subclass), `src/popo/{weights,loss,predictor,ema}.py`
and `src/popo/trainer.py` at commit 7f22607. This module follows that code; where the code and the paper's text part,
the code wins (the weight is a softmax of the *mean* token log-prob, not of the sequence probability of Eq. 8).

For a prompt x with G rollouts y_i, rewards r_i and positives S⁺(x) = {i : r_i > τ_r}:

    m_i    = Σ_t ℓ_{i,t}·mask_{i,t} / max(1, Σ_t mask_{i,t})           mean token log-prob, θ_old, no gradient
    w_i    = softmax_{j ∈ S⁺(x)}(m_j / temperature)_i on S⁺(x), 0 elsewhere                       (Eq. 8)
             ("uniform": 1/|S⁺(x)| on S⁺(x); a group without a positive: all 0)
    L_NLL  = − Σ_i Σ_t w_i·ℓ_{i,t}·mask_{i,t} / max(1, Σ_i Σ_t 1[w_i > 0]·mask_{i,t})                (Eq. 6)
    L_sim  = − Σ_i w_i·cos(h_φ(f_θ(y_i)), sg(z_ξ(y_i) + ε_i)) / max(1e-8, Σ_i w_i)         (Eq. 9, BYOL style)
    L_ent  = − Σ_{i,t} H_{i,t}·mask_{i,t} / max(1, Σ mask)        every completion token, negatives included (Eq. 10)
    L      = L_NLL + α·L_sim + β_ent·L_ent                                                           (Eq. 7)

f_θ is the masked mean over the completion positions of the online model's post-norm last hidden states, h_φ the
predictor MLP, z_ξ the same mean for the EMA target ξ ← τ·ξ + (1 − τ)·θ, and ε ~ N(0, σ²I) noise on the target
features during training. The weights are detached; the target features are detached (stop-gradient); ℓ and H carry
gradient to θ, the prediction to φ and θ. A micro-batch without a positive returns the authors' graph-connected zero
0·Σℓ + 0·Σp (so DDP/FSDP hooks fire), dropping the entropy term with the rest.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F


# The authors' `POPOConfig` defaults (src/popo/config.py, configs/popo/default.yaml)
POPO_PAPER_SETTINGS = {
    "alpha": 0.1,
    "beta_entropy": 0.01,
    "tau": 0.995,
    "reward_threshold": 0.0,
    "predictor_hidden_dim": 1024,
    "predictor_layers": 2,
    "feature_noise_std": 0.02,
    "weight_mode": "softmax",
    "length_normalize": False,
    "kl_monitor_steps": 10,
}
# The reported Qwen2.5-Math-7B run (the README's command): the values it changes from the defaults
POPO_REPORTED_7B = {"tau": 0.999, "feature_noise_std": 0.01, "predictor_hidden_dim": 4096, "learning_rate": 1e-7}
POPO_WEIGHT_MODES = ("softmax", "uniform")


class PopoLoss(NamedTuple):
    """POPO's micro-batch loss (before the division by the gradient-accumulation steps) and its parts.

    Attributes:
        loss: L = L_NLL + α·L_sim + β_ent·L_ent (scalar, with gradient), or the graph-connected zero.
        nll: L_NLL, detached.
        sim: L_sim, detached.
        ent: L_ent = −(mean token entropy), detached.
        entropy: mean token entropy over the mask (detached; logged even when the loss is the zero).
    """

    loss: torch.Tensor
    nll: torch.Tensor
    sim: torch.Tensor
    ent: torch.Tensor
    entropy: torch.Tensor


def _check_weight_arguments(weight_mode, temperature, num_generations, batch_size) -> None:
    if weight_mode not in POPO_WEIGHT_MODES:
        raise ValueError(f"POPO weight_mode must be one of {list(POPO_WEIGHT_MODES)}, got {weight_mode!r}.")
    if not temperature > 0:  # also refuses NaN
        raise ValueError(f"POPO's softmax temperature must be > 0, got {temperature!r} (the authors': 1.0).")
    if num_generations < 1 or batch_size % num_generations:
        raise ValueError(
            f"POPO's weights need whole groups: {batch_size} rollouts are not groups of num_generations="
            f"{num_generations} (rows are grouped contiguously, G per prompt)."
        )


def mean_token_logps(
    per_token_logps: torch.Tensor, completion_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """m_i = Σ_t ℓ_{i,t}·mask_{i,t} / max(1, Σ_t mask_{i,t}) and the length max(1, Σ_t mask_{i,t}), float32, detached,
    each ``(B,)``: what the weights read (a trainer gathers these across processes, not the ``(B, T)`` log-probs)."""
    with torch.no_grad():
        mask = completion_mask.float()
        lengths = mask.sum(-1).clamp(min=1.0)
        return (per_token_logps.float() * mask).sum(-1) / lengths, lengths


def popo_weights_from_means(
    mean_logps: torch.Tensor,
    lengths: torch.Tensor,
    positive: torch.Tensor,
    num_generations: int,
    weight_mode: str = "softmax",
    temperature: float = 1.0,
    length_normalize: bool = False,
) -> torch.Tensor:
    """`popo_weights` from the per-rollout mean log-probs and lengths of `mean_token_logps` (same arguments)."""
    _check_weight_arguments(weight_mode, temperature, num_generations, mean_logps.shape[0])
    with torch.no_grad():
        pos = positive.bool().view(-1, num_generations)
        if weight_mode == "softmax":
            scores = mean_logps.float().view(-1, num_generations).masked_fill(~pos, float("-inf"))
            weights = torch.nan_to_num(torch.softmax(scores / temperature, dim=-1), nan=0.0)  # no positive: 0
        else:
            weights = pos.float() / pos.float().sum(-1, keepdim=True).clamp(min=1.0)
        if length_normalize:
            weights = weights / lengths.float().view(-1, num_generations) * pos.float()
            weights = weights / weights.sum(-1, keepdim=True).clamp(min=1e-8)
        return weights.reshape(-1)


def popo_weights(
    per_token_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    positive: torch.Tensor,
    num_generations: int,
    weight_mode: str = "softmax",
    temperature: float = 1.0,
    length_normalize: bool = False,
) -> torch.Tensor:
    """POPO's per-rollout weights (Eq. 8, as `compute_popo_weights` runs it), float32, detached, shape ``(B,)``.

    Per group of ``num_generations`` contiguous rows: w = softmax over the positives of m / temperature (m the mean
    token log-prob over the mask, a length of at least 1), 0 for negatives and for a group without a positive (the
    softmax of an all −inf row is NaN, set to 0). ``"uniform"``: 1/|S⁺| on the positives. ``length_normalize``:
    w ← w / L on the positives (L the completion length, at least 1), renormalised per group (sum clamped at 1e-8).
    Each group with a positive sums to 1.

    Args:
        per_token_logps: ``(B, T)`` log-probs of the sampled tokens (the authors': θ_old at the sampling temperature).
        completion_mask: ``(B, T)`` 1 on completion tokens.
        positive: ``(B,)`` bool, r > τ_r.
        num_generations: G, the group size.
        weight_mode: ``"softmax"`` (the paper's) or ``"uniform"`` (the authors' ablation).
        temperature: the softmax temperature (the authors': 1.0).
        length_normalize: the authors' `length_normalize_weights` (default off).
    """
    means, lengths = mean_token_logps(per_token_logps, completion_mask)
    return popo_weights_from_means(
        means, lengths, positive, num_generations, weight_mode, temperature, length_normalize
    )


def masked_mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B, T, D)``, ``(B, T)`` → ``(B, D)``: the mean of the hidden states over the masked positions (count at least
    1), in the hidden states' dtype, as the authors' `_masked_mean_pool`."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = 128) -> torch.Tensor:
    """Per-token entropy H = −Σ_v p_v log p_v of ``(B, T, V)`` logits, in float32, WITH gradient (L_ent backpropagates;
    TRL's own entropies are computed without), ``chunk_size`` rows at a time (the authors' `_chunked_entropy_from_logits`)."""
    batch, length, vocab = logits.shape
    rows = logits.reshape(-1, vocab)
    chunks = []
    for start in range(0, rows.size(0), chunk_size):
        log_probs = rows[start : start + chunk_size].float().log_softmax(dim=-1)
        chunks.append(-(log_probs.exp() * log_probs).sum(dim=-1))
    if not chunks:
        return logits.new_zeros((batch, length), dtype=torch.float32)
    return torch.cat(chunks).reshape(batch, length)


def popo_loss(
    per_token_logps: torch.Tensor,
    entropies: torch.Tensor,
    completion_mask: torch.Tensor,
    weights: torch.Tensor,
    positive: torch.Tensor,
    predicted: torch.Tensor,
    target: torch.Tensor,
    alpha: float = POPO_PAPER_SETTINGS["alpha"],
    beta_entropy: float = POPO_PAPER_SETTINGS["beta_entropy"],
    target_noise: torch.Tensor | None = None,
) -> PopoLoss:
    """POPO's loss on one micro-batch (Eqs. 6, 7, 9, 10; the authors' `POPOLoss.__call__` and the zero branch of
    `POPOTrainer._compute_loss`), before the division by the gradient-accumulation steps.

    Args:
        per_token_logps: ``(B, T)`` ℓ, with gradient (the online model, at the sampling temperature).
        entropies: ``(B, T)`` H, with gradient (`entropy_from_logits`).
        completion_mask: ``(B, T)``.
        weights: ``(B,)`` the `popo_weights` of these rows (detached here).
        positive: ``(B,)`` bool: which rows are positives; none → the graph-connected zero.
        predicted: ``(B, D)`` h_φ(f_θ), with gradient.
        target: ``(B, D)`` z_ξ, the EMA target's pooled features (detached here: stop-gradient).
        alpha: α, the weight of L_sim (the authors': 0.1).
        beta_entropy: β_ent, the weight of L_ent (the authors': 0.01).
        target_noise: ``(B, D)`` ε, a draw of N(0, σ²I) added to the target (training only), or None.
    """
    # Every sum in float32 (float64 stays float64), whatever the log-probs' dtype: under bf16 autocast TRL's log-probs
    # are bf16, and bf16 weights, a bf16 weighted-NLL sum and a bf16 token count (exact only up to 256) put the loss
    # 1.7e-3 (relative) off its float32 value on 8 × 300 tokens (tests/test_popo_loss.py). The authors' entropy term
    # is float32 (float32 entropies over an integer token count); we cast before the sums as they keep float32.
    dtype = torch.promote_types(per_token_logps.dtype, torch.float32)
    mask = completion_mask.to(dtype)
    entropies = entropies.to(dtype)
    entropy = ((entropies.detach() * mask).sum() / mask.sum().clamp(min=1.0)).detach()
    if not bool(positive.any()):
        # The authors' zero: connected to the model and the predictor so every rank's backward hooks fire
        zero = 0.0 * per_token_logps.sum() + 0.0 * predicted.sum()
        flat = zero.detach()
        return PopoLoss(zero, flat, flat, flat, entropy)
    w = weights.detach().to(dtype)
    # Eq. 6: normalised by the positive tokens (a group with k equal positives weighs ≈ 1/k of a one-positive group)
    nll = (w.unsqueeze(1) * -per_token_logps.to(dtype) * mask).sum() / (
        (w > 0).unsqueeze(1).to(dtype) * mask
    ).sum().clamp(min=1.0)
    tgt = target.detach() if target_noise is None else target.detach() + target_noise
    # Eq. 9: cosine between the prediction and the stop-gradient target, weighted, over the weight sum
    cos = (F.normalize(predicted, dim=-1) * F.normalize(tgt, dim=-1)).sum(dim=-1)
    sim = -(w * cos).sum() / w.sum().clamp(min=1e-8)
    ent = -(entropies * mask).sum() / mask.sum().clamp(min=1.0)  # Eq. 10: every completion token
    loss = nll + alpha * sim + beta_entropy * ent
    return PopoLoss(loss, nll.detach(), sim.detach(), ent.detach(), entropy)


def popo_kl_k3(online_logps: torch.Tensor, target_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The monitored KL(π_θ ‖ π_ξ) estimate k3 = mean_mask[exp(ℓ_ξ − ℓ_θ) − (ℓ_ξ − ℓ_θ) − 1], detached (the authors'
    `compute_kl_divergence`; logged only, never in the gradient)."""
    diff = target_logps.detach() - online_logps.detach()
    mask = mask.to(diff.dtype)
    return ((torch.exp(diff) - diff - 1) * mask).sum() / mask.sum().clamp(min=1.0)


class PopoPredictor(torch.nn.Module):
    """The predictor h_φ (the authors' `PredictorMLP`, after BYOL): [Linear → LayerNorm → ReLU] × (layers − 1) →
    Linear, from and to the model's hidden size; Xavier-uniform weights, zero biases (LayerNorm: ones and zeros)."""

    def __init__(self, dim: int, hidden_dim: int = 1024, layers: int = 2):
        super().__init__()
        if layers < 2:
            raise ValueError(f"POPO's predictor needs at least 2 layers, got {layers}.")
        modules, width = [], dim
        for _ in range(layers - 1):
            modules += [
                torch.nn.Linear(width, hidden_dim),
                torch.nn.LayerNorm(hidden_dim),
                torch.nn.ReLU(inplace=True),
            ]
            width = hidden_dim
        modules.append(torch.nn.Linear(width, dim))
        self.net = torch.nn.Sequential(*modules)
        for module in self.modules():
            if isinstance(module, torch.nn.Linear):
                torch.nn.init.xavier_uniform_(module.weight)
                torch.nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
