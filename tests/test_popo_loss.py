"""POPO's maths (trl_rlvr_ext.losses.popo): hand-computed values, what carries gradient, and agreement with a re-typed
transcription of the authors' `compute_popo_weights`, `POPOLoss`, `_chunked_entropy_from_logits`, `_masked_mean_pool`,
`PredictorMLP` and `EMATargetPolicy.update` (momo1443/colm2026-POPO@7f22607, src/popo/), written below."""

import math

import pytest
import torch
import torch.nn.functional as F

from trl_rlvr_ext.losses.popo import (
    POPO_PAPER_SETTINGS,
    PopoPredictor,
    entropy_from_logits,
    masked_mean_pool,
    popo_kl_k3,
    popo_loss,
    popo_weights,
)


# ---------------------------------------------------------------- reference: the authors' functions, re-typed
def authors_weights(per_token_logps, completion_mask, positive_mask, G, temperature=1.0, mode="softmax", length=False):
    B = per_token_logps.size(0)
    P = B // G
    pos = positive_mask.view(P, G)
    if mode == "softmax":
        seq = (per_token_logps * completion_mask).sum(dim=-1) / completion_mask.sum(dim=-1).clamp(min=1.0)
        masked = seq.view(P, G).clone()
        masked[~pos] = float("-inf")
        w = torch.nan_to_num(F.softmax(masked / temperature, dim=-1), nan=0.0)
    else:
        w = pos.float() / pos.float().sum(dim=-1, keepdim=True).clamp(min=1.0)
    if length:
        w = w / completion_mask.sum(dim=-1).clamp(min=1.0).view(P, G)
        w = w * pos.float()
        w = w / w.sum(dim=-1, keepdim=True).clamp(min=1e-8)
    return w.view(B)


def authors_loss(per_token_logps, completion_mask, weights, entropies, online, target, alpha, beta, noise=None):
    """`POPOLoss.__call__` with the noise drawn outside (`training=True` adds `randn_like(target) * std`)."""
    nll = (weights.unsqueeze(1) * -per_token_logps * completion_mask).sum() / (
        (weights > 0).unsqueeze(1).float() * completion_mask
    ).sum().clamp(min=1.0)
    if noise is not None:
        target = target + noise
    cos = (F.normalize(online, dim=-1) * F.normalize(target, dim=-1)).sum(dim=-1)
    sim = -(weights * cos).sum() / weights.sum().clamp(min=1e-8)
    ent = -((entropies * completion_mask).sum() / completion_mask.sum().clamp(min=1.0))
    return nll + alpha * sim + beta * ent, nll, sim, ent


def authors_entropy(logits, chunk_size=128):
    B, T, V = logits.shape
    rows = logits.reshape(-1, V)
    out = []
    for i in range(0, rows.size(0), chunk_size):
        lp = rows[i : i + chunk_size].float().log_softmax(dim=-1)
        out.append(-(lp.exp() * lp).sum(dim=-1))
    return torch.cat(out).reshape(B, T)


def authors_pool(hidden, mask):
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


def authors_ema_update(target_params, online_params, tau):
    for t, o in zip(target_params, online_params, strict=True):
        t.data.mul_(tau).add_(o.data.to(t.device), alpha=1.0 - tau)


def random_batch(seed, groups=3, G=4, T=6, D=5):
    g = torch.Generator().manual_seed(seed)
    B = groups * G
    logps = -torch.rand(B, T, generator=g) * 3
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    positive = torch.rand(B, generator=g) > 0.5
    positive[:G] = False  # one group without a positive
    return g, logps, mask, positive


# ---------------------------------------------------------------- weights: hand-computed
def test_weights_by_hand():
    # group 1: positives 0 and 2 with mean log-probs -1 and -2 (token values below); softmax over {-1, -2}:
    #   e^-1 / (e^-1 + e^-2) = 1 / (1 + e^-1) = 0.731059, and 0.268941. Row 1 (mean -0.5) and row 3 are negatives.
    # group 2: no positive -> all 0.
    logps = torch.tensor([[-1.0, -1.0], [-0.5, -0.5], [-3.0, -1.0], [-9.0, 0.0]] * 2)
    mask = torch.ones(8, 2)
    positive = torch.tensor([True, False, True, False, False, False, False, False])
    w = popo_weights(logps, mask, positive, num_generations=4)
    a = 1 / (1 + math.exp(-1))
    torch.testing.assert_close(w, torch.tensor([a, 0, 1 - a, 0, 0, 0, 0, 0]))
    # temperature 2 halves the score gap: 1 / (1 + e^-0.5) = 0.622459
    w2 = popo_weights(logps, mask, positive, num_generations=4, temperature=2.0)
    b = 1 / (1 + math.exp(-0.5))
    torch.testing.assert_close(w2[:4], torch.tensor([b, 0, 1 - b, 0]))
    # uniform: 1/2 on each positive
    wu = popo_weights(logps, mask, positive, num_generations=4, weight_mode="uniform")
    torch.testing.assert_close(wu[:4], torch.tensor([0.5, 0, 0.5, 0]))


def test_weights_use_the_mean_not_the_sum_and_length_normalise():
    # Row 0: one token at -1 (mean -1); row 1: three tokens at -1 (mean -1, sum -3). Same mean -> equal weights 1/2
    # (the sequence probability would give e^-1 : e^-3). length_normalize: w/L = 1/2, 1/6 -> renormalised 3/4, 1/4.
    logps = torch.full((2, 3), -1.0)
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    positive = torch.tensor([True, True])
    torch.testing.assert_close(popo_weights(logps, mask, positive, 2), torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(
        popo_weights(logps, mask, positive, 2, length_normalize=True), torch.tensor([0.75, 0.25])
    )


def test_weights_are_detached_and_refuse_bad_arguments():
    logps = torch.randn(4, 3, requires_grad=True)
    w = popo_weights(logps, torch.ones(4, 3), torch.tensor([True, False, True, True]), 2)
    assert not w.requires_grad
    with pytest.raises(ValueError, match="weight_mode"):
        popo_weights(logps, torch.ones(4, 3), torch.ones(4, dtype=torch.bool), 2, weight_mode="sequence")
    with pytest.raises(ValueError, match="temperature"):
        popo_weights(logps, torch.ones(4, 3), torch.ones(4, dtype=torch.bool), 2, temperature=0.0)
    with pytest.raises(ValueError, match="whole groups"):
        popo_weights(logps, torch.ones(4, 3), torch.ones(4, dtype=torch.bool), 3)


def test_authors_fixture_single_prompt_mixed():
    # The authors' test_single_prompt_mixed inputs: positive means -0.4 and -0.25, so the weights are
    # 1 / (1 + e^0.15) = 0.4626 and 0.5374 (the spec's numbers), negatives 0
    logps = torch.tensor([[-0.5, -0.3], [-0.8, -0.9], [-0.3, -0.2], [-1.0, -1.2]])
    w = popo_weights(logps, torch.ones(4, 2), torch.tensor([True, False, True, False]), 4)
    torch.testing.assert_close(w, torch.tensor([0.4626, 0.0, 0.5374, 0.0]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("mode", "temperature", "length"), [("softmax", 1.0, False), ("softmax", 0.7, True), ("uniform", 1.0, True)]
)
def test_weights_equal_the_authors(seed, mode, temperature, length):
    _, logps, mask, positive = random_batch(seed)
    ours = popo_weights(logps, mask, positive, 4, weight_mode=mode, temperature=temperature, length_normalize=length)
    theirs = authors_weights(logps, mask, positive, 4, temperature=temperature, mode=mode, length=length)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    groups = ours.view(-1, 4).sum(-1)
    has_positive = positive.view(-1, 4).any(-1)
    torch.testing.assert_close(groups[has_positive], torch.ones(int(has_positive.sum())))
    assert (groups[~has_positive] == 0).all()


# ---------------------------------------------------------------- loss: hand-computed
def test_nll_by_hand_k_equal_positives():
    # One group, k equal positives of 2 tokens at log-prob -1, weights 1/k: Σ w·(−ℓ)·mask = k·(1/k)·2 = 2 over
    # 2k positive tokens: L_NLL = 1/k (the spec's 1, 0.5, 0.25, 0.125).
    for k in (1, 2, 4, 8):
        logps = torch.full((8, 2), -1.0)
        positive = torch.arange(8) < k
        w = positive.float() / k
        out = popo_loss(logps, torch.zeros(8, 2), torch.ones(8, 2), w, positive, torch.ones(8, 3), torch.ones(8, 3))
        torch.testing.assert_close(out.nll, torch.tensor(1.0 / k))


def test_loss_by_hand():
    # Two rows of two tokens. Row 0 positive (w = 1), ℓ = [-1, -3]; row 1 negative (w = 0), ℓ = [-2, ...], mask [1, 0].
    #   L_NLL = (1·1 + 1·3) / 2 positive tokens = 2.
    #   Prediction row 0 = (1, 0), target (1, 1): cos = 1/√2; row 1 has weight 0. L_sim = −(1·0.707107)/1 = −0.707107.
    #   Entropies [[0.5, 1.5], [1.0, 9.0]] over the 3 masked tokens: mean 1.0, L_ent = −1.0.
    #   α = 0.1, β = 0.01: L = 2 − 0.0707107 − 0.01 = 1.9192893.
    logps = torch.tensor([[-1.0, -3.0], [-2.0, -5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    ent = torch.tensor([[0.5, 1.5], [1.0, 9.0]])
    w = torch.tensor([1.0, 0.0])
    pred = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    tgt = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = popo_loss(logps, ent, mask, w, w > 0, pred, tgt, alpha=0.1, beta_entropy=0.01)
    torch.testing.assert_close(out.nll, torch.tensor(2.0))
    torch.testing.assert_close(out.sim, torch.tensor(-1 / math.sqrt(2)))
    torch.testing.assert_close(out.ent, torch.tensor(-1.0))
    torch.testing.assert_close(out.entropy, torch.tensor(1.0))
    torch.testing.assert_close(out.loss, torch.tensor(2.0 - 0.1 / math.sqrt(2) - 0.01))
    # noise on the target: target (1, 1) + (−1, 0) = (0, 1) -> cos((1, 0), (0, 1)) = 0, so L_sim = 0
    noisy = popo_loss(logps, ent, mask, w, w > 0, pred, tgt, target_noise=torch.tensor([[-1.0, 0.0], [0.0, 0.0]]))
    torch.testing.assert_close(noisy.sim, torch.tensor(0.0))


def test_gradients_and_stop_gradients():
    g, logps, mask, positive = random_batch(3)
    logps = logps.clone().requires_grad_(True)
    ent = torch.rand(logps.shape, generator=g).requires_grad_(True)
    w = popo_weights(logps, mask, positive, 4).requires_grad_(True)  # a weight with grad must still be detached
    pred = torch.randn(12, 5, generator=g, requires_grad=True)
    tgt = torch.randn(12, 5, generator=g, requires_grad=True)
    out = popo_loss(logps, ent, mask, w, positive, pred, tgt)
    out.loss.backward()
    assert w.grad is None and tgt.grad is None  # detach points: the weights and the EMA target
    # ∂L/∂ℓ_{i,t} = −w_i·mask_{i,t} / N⁺ (N⁺ positive tokens): zero on negatives, on padding
    n_pos = ((w.detach() > 0).float()[:, None] * mask).sum()
    torch.testing.assert_close(logps.grad, -(w.detach()[:, None] * mask) / n_pos)
    # ∂L/∂H = −β·mask / N on every completion token, negatives included
    torch.testing.assert_close(ent.grad, -POPO_PAPER_SETTINGS["beta_entropy"] * mask / mask.sum())
    assert (pred.grad[w.detach() == 0] == 0).all() and pred.grad[w.detach() > 0].abs().sum() > 0


def test_no_positive_gives_the_connected_zero():
    logps = torch.randn(4, 3, requires_grad=True)
    pred = torch.randn(4, 2, requires_grad=True)
    ent = torch.rand(4, 3, requires_grad=True)
    none = torch.zeros(4, dtype=torch.bool)
    out = popo_loss(logps, ent, torch.ones(4, 3), torch.zeros(4), none, pred, torch.randn(4, 2))
    assert out.loss.item() == 0.0 and out.ent.item() == 0.0
    out.loss.backward()
    assert (logps.grad == 0).all() and (pred.grad == 0).all() and ent.grad is None
    torch.testing.assert_close(out.entropy, ent.detach().mean())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_loss_equals_the_authors(seed):
    g, logps, mask, positive = random_batch(seed)
    w = popo_weights(logps, mask, positive, 4)
    ent = torch.rand(logps.shape, generator=g) * 2
    pred = torch.randn(12, 5, generator=g)
    tgt = torch.randn(12, 5, generator=g)
    noise = torch.randn(12, 5, generator=g) * 0.02
    ours = popo_loss(logps, ent, mask, w, positive, pred, tgt, alpha=0.3, beta_entropy=0.05, target_noise=noise)
    theirs = authors_loss(logps, mask, w, ent, pred, tgt, 0.3, 0.05, noise=noise)
    for a, b in zip((ours.loss, ours.nll, ours.sim, ours.ent), theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------- entropy, pooling, KL, predictor, EMA
def test_entropy_by_hand_and_against_the_authors():
    # uniform over 4 tokens: H = log 4; a one-hot (logits 0 and -inf-ish): H ≈ 0
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[math.log(4), 0.0]]), atol=1e-6, rtol=0)
    g = torch.Generator().manual_seed(0)
    big = torch.randn(3, 70, 11, generator=g, requires_grad=True)
    ours = entropy_from_logits(big, chunk_size=128)
    torch.testing.assert_close(ours, authors_entropy(big), rtol=0, atol=0)
    ours.sum().backward()
    assert big.grad is not None and big.grad.abs().sum() > 0  # with gradient, unlike TRL's


def test_pool_by_hand_and_against_the_authors():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    torch.testing.assert_close(masked_mean_pool(hidden, torch.tensor([[1, 1, 0]])), torch.tensor([[2.0, 3.0]]))
    g = torch.Generator().manual_seed(1)
    h = torch.randn(4, 6, 3, generator=g)
    m = (torch.rand(4, 6, generator=g) > 0.3).long()
    m[0] = 0  # an empty row: count clamped at 1 -> zeros
    torch.testing.assert_close(masked_mean_pool(h, m), authors_pool(h, m), rtol=0, atol=0)


def test_kl_k3_by_hand():
    # ℓ_ξ − ℓ_θ = log 2 on one token, 0 on the other: (2 − log 2 − 1 + 0) / 2 = (1 − log 2) / 2
    online = torch.tensor([[0.0, -1.0, 5.0]])
    target = torch.tensor([[math.log(2), -1.0, 0.0]])
    torch.testing.assert_close(
        popo_kl_k3(online, target, torch.tensor([[1, 1, 0]])), torch.tensor((1 - math.log(2)) / 2)
    )


def test_predictor_shape_and_init():
    p = PopoPredictor(8, hidden_dim=16, layers=3)
    kinds = [type(m).__name__ for m in p.net]
    assert kinds == ["Linear", "LayerNorm", "ReLU", "Linear", "LayerNorm", "ReLU", "Linear"]
    assert all((m.bias == 0).all() for m in p.net if isinstance(m, torch.nn.Linear))
    assert p(torch.randn(5, 8)).shape == (5, 8)
    with pytest.raises(ValueError, match="at least 2"):
        PopoPredictor(8, layers=1)


def test_trl_sync_target_model_is_the_authors_ema_update():
    # The trainer reuses TRL's SyncRefModelCallback.sync_target_model with alpha = 1 − τ; outside DeepSpeed ZeRO-3
    # (and without an accelerator here) that is its `_sync_target_model`
    from trl.trainer.callbacks import SyncRefModelCallback

    sync = SyncRefModelCallback._sync_target_model

    torch.manual_seed(0)
    online = torch.nn.Linear(4, 3)
    ours, theirs = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    theirs.load_state_dict(ours.state_dict())
    start = [p.detach().clone() for p in ours.parameters()]
    for tau in (0.995, 0.999, 0.9):
        sync(online, ours, 1 - tau)
        authors_ema_update(list(theirs.parameters()), list(online.parameters()), tau)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    # by hand for one step: ξ₁ = τ·ξ₀ + (1 − τ)·θ
    fresh = torch.nn.Linear(4, 3)
    fresh.load_state_dict(dict(zip(["weight", "bias"], start, strict=True)))
    sync(online, fresh, 1 - 0.995)
    torch.testing.assert_close(fresh.weight, 0.995 * start[0] + 0.005 * online.weight)


@pytest.mark.parametrize("autocast", [False, True], ids=["bf16-inputs", "bf16-autocast"])
def test_bf16_log_probs_are_summed_in_float32(autocast):
    """Under bf16 autocast TRL's log-probs are bf16 (`selective_log_softmax` of bf16 logits). The loss must equal the
    authors' `POPOLoss` on the same values in float32 (their entropies are float32, their mask an integer count) to
    float32 rounding; summing in bf16 (the weights rounded to bf16, a bf16 token count, exact only up to 256) was
    1.7e-3 off (relative) on this batch of 8 × 300 tokens."""
    g = torch.Generator().manual_seed(7)
    B, T, G = 8, 300, 4
    logps = (-torch.rand(B, T, generator=g) * 3).to(torch.bfloat16)
    lengths = torch.randint(200, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()  # TRL's completion mask: integers
    positive = torch.tensor([True, False, True, True, False, True, False, False])
    w = popo_weights(logps.float(), mask, positive, G)
    ent = torch.rand(B, T, generator=g) * 2  # float32, as `entropy_from_logits` returns
    pred = torch.randn(B, 16, generator=g)
    tgt = torch.randn(B, 16, generator=g).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        ours = popo_loss(logps, ent, mask, w, positive, pred, tgt, alpha=0.1, beta_entropy=0.01)
    theirs = authors_loss(logps.float(), mask.float(), w, ent, pred, tgt, 0.1, 0.01)
    assert ours.loss.dtype == torch.float32
    for a, b in zip((ours.loss, ours.nll, ours.sim, ours.ent), theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=0)
    # the bf16 sums this replaces: far outside that tolerance (the test would fail on them)
    w16, m16 = w.to(torch.bfloat16), mask.to(torch.bfloat16)
    nll16 = (w16.unsqueeze(1) * -logps * m16).sum() / ((w16 > 0).unsqueeze(1).float() * m16).sum()
    ent16 = -(ent * m16).sum() / m16.sum()
    bf16_loss = nll16 + 0.1 * theirs[2] + 0.01 * ent16
    assert abs(bf16_loss.item() / theirs[0].item() - 1) > 1e-4
