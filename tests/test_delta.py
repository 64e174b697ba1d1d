"""DelTA's token weights (trl_rlvr_ext.losses.delta_token_weights): hand-computed values, and agreement with a
step-by-step re-implementation of the authors' `compute_log_prob_h` ("Normal") written below (RUCBM/DelTA@cf048bd,
verl-DelTA/verl/workers/actor/dp_actor.py, `DataParallelPPOActor.compute_log_prob_h`)."""

import math

import pytest
import torch

from trl_rlvr_ext.losses import DELTA_PAPER_SETTINGS, delta_token_weights, delta_weight_stats


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------- reference: the authors' loop, micro-batch by micro-batch
def authors_delta(micro_batches, w_lo=0.8, w_hi=1.2, disc_steps=1):
    """The arithmetic of the authors' `compute_log_prob_h` (impl "Normal"), pass for pass: accumulate over
    micro-batches, clamp where they clamp. Each micro-batch is (h [B,S,H], log_probs [B,S], adv [B], mask [B,S])."""
    eps, lam_w = 1e-8, 1.0

    def vs(mb):
        h, log_probs, adv, token_mask = mb
        return (1.0 - torch.exp(log_probs)).unsqueeze(-1) * h, adv.float(), token_mask.float()

    # pass 1: advantage-weighted sums
    sum_v_pos = sum_v_neg = 0.0
    s_p = s_n = 0.0
    for mb in micro_batches:
        v, adv, token_mask = vs(mb)
        w_pos0 = torch.clamp(adv, min=0.0)[:, None, None] * token_mask.unsqueeze(-1)
        w_neg0 = torch.clamp(-adv, min=0.0)[:, None, None] * token_mask.unsqueeze(-1)
        sum_v_pos = sum_v_pos + (w_pos0 * v).sum(dim=(0, 1))
        sum_v_neg = sum_v_neg + (w_neg0 * v).sum(dim=(0, 1))
        s_p, s_n = s_p + w_pos0.sum(), s_n + w_neg0.sum()
    mu_pos = sum_v_pos / torch.clamp(torch.as_tensor(s_p), min=eps)
    mu_neg = sum_v_neg / torch.clamp(torch.as_tensor(s_n), min=eps)
    d = torch.ones_like(mu_pos)  # the authors overwrite the variance normaliser with ones

    def margins(mb, mp, mn):
        v, adv, token_mask = vs(mb)
        d_pos = (((v - mp.view(1, 1, -1)) ** 2) / d.view(1, 1, -1)).sum(dim=-1)
        d_neg = (((v - mn.view(1, 1, -1)) ** 2) / d.view(1, 1, -1)).sum(dim=-1)
        valid_pos = (adv > 0).float().unsqueeze(1) * token_mask
        valid_neg = (adv < 0).float().unsqueeze(1) * token_mask
        return v, adv, token_mask, lam_w * d_neg - d_pos, lam_w * d_pos - d_neg, valid_pos, valid_neg

    def gamma_of(stats):
        count = max(stats[2], 1.0)
        mean = stats[0] / count
        return math.sqrt(max(stats[1] / count - mean**2, eps))

    # pass 2: margin spreads
    sp, sn = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    for mb in micro_batches:
        _, _, _, m_pos, m_neg, valid_pos, valid_neg = margins(mb, mu_pos, mu_neg)
        for acc, m, valid in ((sp, m_pos, valid_pos), (sn, m_neg, valid_neg)):
            acc[0] += float((m * valid).sum())
            acc[1] += float((m**2 * valid).sum())
            acc[2] += float(valid.sum())
    gamma_pos, gamma_neg = gamma_of(sp), gamma_of(sn)

    # pass 3: refinement
    mu_pos_star, mu_neg_star = mu_pos.clone(), mu_neg.clone()
    for _ in range(disc_steps):
        num_pos, num_neg, den_pos, den_neg = 0.0, 0.0, 0.0, 0.0
        sp, sn = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
        for mb in micro_batches:
            v, adv, _, m_pos, m_neg, valid_pos, valid_neg = margins(mb, mu_pos_star, mu_neg_star)
            w_pos = torch.sigmoid(m_pos / gamma_pos) * torch.clamp(adv, min=0.0).unsqueeze(1) * valid_pos
            w_neg = torch.sigmoid(m_neg / gamma_neg) * torch.clamp(-adv, min=0.0).unsqueeze(1) * valid_neg
            num_pos = num_pos + (w_pos.unsqueeze(-1) * v).sum(dim=(0, 1))
            num_neg = num_neg + (w_neg.unsqueeze(-1) * v).sum(dim=(0, 1))
            den_pos, den_neg = den_pos + w_pos.sum(), den_neg + w_neg.sum()
            for acc, m, valid in ((sp, m_pos, valid_pos), (sn, m_neg, valid_neg)):
                acc[0] += float((m * valid).sum())
                acc[1] += float((m**2 * valid).sum())
                acc[2] += float(valid.sum())
        mu_pos_star = num_pos / torch.clamp(torch.as_tensor(den_pos), min=eps)
        mu_neg_star = num_neg / torch.clamp(torch.as_tensor(den_neg), min=eps)
        gamma_pos, gamma_neg = gamma_of(sp), gamma_of(sn)

    # pass 4: weights, then the renormalisation over every token of every micro-batch
    weights, tk_sum, wht_sum = [], 0.0, 0.0
    for mb in micro_batches:
        _, adv, token_mask, m_pos, m_neg, _, _ = margins(mb, mu_pos_star, mu_neg_star)
        w_pos_final = w_lo + (w_hi - w_lo) * torch.sigmoid(m_pos / gamma_pos)
        w_neg_final = w_lo + (w_hi - w_lo) * torch.sigmoid(m_neg / gamma_neg)
        pos_seq = (adv > 0).float().unsqueeze(1)
        neg_seq = (adv < 0).float().unsqueeze(1)
        zero_seq = 1.0 - pos_seq - neg_seq
        weight = (w_pos_final * pos_seq + w_neg_final * neg_seq + w_lo * zero_seq) * token_mask
        tk_sum, wht_sum = tk_sum + token_mask.sum(), wht_sum + weight.sum()
        weights.append(weight)
    gy_norm = tk_sum / torch.as_tensor(wht_sum).clamp_min(1e-8)
    return torch.cat(weights) * gy_norm


# ---------------------------------------------------------------- a hand-computable batch
HALF = math.log(0.5)  # p = 0.5, so v = h / 2


def toy_batch():
    """v (= h/2): positive sequence (2, 0), (0, 0); negative sequence (−2, 0), (0, 0); a zero-advantage sequence;
    and a masked-out third token in every sequence whose hidden state is huge (it must change nothing)."""
    v = torch.tensor(
        [
            [[2.0, 0.0], [0.0, 0.0], [1e4, -1e4]],
            [[-2.0, 0.0], [0.0, 0.0], [1e4, 1e4]],
            [[5.0, 3.0], [-1.0, 7.0], [1e4, 1e4]],
        ]
    )
    logps = torch.full((3, 3), HALF)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0]])
    advantages = torch.tensor([1.0, -1.0, 0.0])
    return 2 * v, logps, advantages, mask


def test_hand_computed_without_refinement():
    # μ⁺ = (1, 0), μ⁻ = (−1, 0): margins 8, 0 (positive side), −8, 0 (so −m = 8, 0 on the negative side): γ = 4
    hidden, logps, advantages, mask = toy_batch()
    out = delta_token_weights(hidden, logps, advantages, mask, refine_steps=0)
    torch.testing.assert_close(out.mu_pos, torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(out.mu_neg, torch.tensor([-1.0, 0.0]))
    assert out.gamma_pos.item() == pytest.approx(4.0) and out.gamma_neg.item() == pytest.approx(4.0)
    raw_high = 0.8 + 0.4 * sigmoid(2.0)  # σ(8 / 4)
    raw_mid = 0.8 + 0.4 * 0.5  # σ(0)
    raw_zero = 0.8  # zero-advantage tokens
    scale = 6 / (2 * raw_high + 2 * raw_mid + 2 * raw_zero)
    expected = torch.tensor(
        [[raw_high, raw_mid, 0.0], [raw_high, raw_mid, 0.0], [raw_zero, raw_zero, 0.0]], dtype=torch.float32
    )
    torch.testing.assert_close(out.weights, expected * scale)
    assert out.weights.dtype == torch.float32
    assert out.weights[mask.bool()].mean().item() == pytest.approx(1.0)


def test_hand_computed_with_one_refinement():
    # posteriors σ(2) for (±2, 0) and 0.5 for the origin: μ⁺ = (c, 0), μ⁻ = (−c, 0) with c = 2σ(2) / (σ(2) + 0.5);
    # γ stays 4 (the margins of that step were the first ones); the final margin of (2, 0) is (2 + c)² − (2 − c)² = 8c
    hidden, logps, advantages, mask = toy_batch()
    out = delta_token_weights(hidden, logps, advantages, mask, refine_steps=1)
    c = 2 * sigmoid(2.0) / (sigmoid(2.0) + 0.5)
    torch.testing.assert_close(out.mu_pos, torch.tensor([c, 0.0]))
    torch.testing.assert_close(out.mu_neg, torch.tensor([-c, 0.0]))
    assert out.gamma_pos.item() == pytest.approx(4.0)
    raw_high = 0.8 + 0.4 * sigmoid(8 * c / 4)
    scale = 6 / (2 * raw_high + 2 * 1.0 + 2 * 0.8)
    assert out.weights[0, 0].item() == pytest.approx(raw_high * scale, rel=1e-6)
    assert out.weights[1, 0].item() == pytest.approx(raw_high * scale, rel=1e-6)
    assert out.weights[0, 1].item() == pytest.approx(1.0 * scale, rel=1e-6)
    assert out.weights[2, 0].item() == pytest.approx(0.8 * scale, rel=1e-6)


def _random_batch(seed, batch=6, length=7, hidden=5, signs=(1.0, -1.0, 0.0)):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, length, hidden, generator=g)
    logps = -torch.rand(batch, length, generator=g) * 3
    adv = torch.tensor([signs[i % len(signs)] for i in range(batch)]) * (0.5 + torch.rand(batch, generator=g))
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    return h, logps, adv, mask


@pytest.mark.parametrize(
    "signs, refine_steps",
    [
        ((1.0, -1.0, 0.0), 1),  # mixed, with zero-advantage sequences
        ((1.0, -1.0), 0),
        ((1.0, -1.0, -1.0), 3),
        ((1.0,), 1),  # all positive: μ⁻ is the zero vector
        ((-1.0,), 1),  # all negative
        ((0.0,), 1),  # no signal: every weight 1
    ],
)
def test_matches_the_authors_loop(signs, refine_steps):
    h, logps, adv, mask = _random_batch(0, signs=signs)
    # the authors accumulate over micro-batches: split ours in three, give theirs the pieces
    pieces = [(h[i : i + 2], logps[i : i + 2], adv[i : i + 2], mask[i : i + 2]) for i in range(0, 6, 2)]
    expected = authors_delta(pieces, disc_steps=refine_steps)
    out = delta_token_weights(h, logps, adv, mask, refine_steps=refine_steps)
    torch.testing.assert_close(out.weights, expected.float(), rtol=1e-5, atol=1e-6)
    assert torch.isfinite(out.weights).all()
    assert out.weights[mask.bool()].mean().item() == pytest.approx(1.0, rel=1e-6)
    assert (out.weights[~mask.bool()] == 0).all()
    if signs == (1.0,):
        assert (out.mu_neg == 0).all()
    if signs == (0.0,):
        torch.testing.assert_close(out.weights, mask.float())


def test_advantages_as_a_column_and_bf16_hidden_states():
    h, logps, adv, mask = _random_batch(1)
    flat = delta_token_weights(h, logps, adv, mask)
    column = delta_token_weights(h, logps, adv[:, None], mask)
    torch.testing.assert_close(flat.weights, column.weights, rtol=0, atol=0)
    half = delta_token_weights(h.bfloat16(), logps, adv, mask)
    assert half.weights.dtype == torch.float32
    with pytest.raises(ValueError, match="one per sequence"):
        delta_token_weights(h, logps, adv[:, None].expand(-1, 7), mask)


def test_no_gradient_and_empty_mask():
    h, logps, adv, mask = _random_batch(2)
    h.requires_grad_(True)
    out = delta_token_weights(h, logps, adv, mask)
    assert not out.weights.requires_grad
    empty = delta_token_weights(h, logps, adv, torch.zeros_like(mask))
    assert (empty.weights == 0).all()


def test_weights_stay_in_the_renormalised_range_and_track_the_margin():
    h, logps, adv, mask = _random_batch(3, batch=12, length=9, hidden=8)
    out = delta_token_weights(h, logps, adv, mask)
    scale = out.weights.sum() / (mask.sum() * 1.0)  # 1 by construction; the range is [0.8, 1.2] · N / Σ raw
    raw_sum = ((out.weights / scale) * mask).sum()
    assert scale.item() == pytest.approx(1.0)
    assert raw_sum > 0
    sel = mask.bool() & (adv > 0)[:, None]
    # on the positive side the weight increases with the margin
    order = torch.argsort(out.margin[sel])
    assert (out.weights[sel][order].diff() >= -1e-6).all()


def test_argument_checks():
    h, logps, adv, mask = _random_batch(4)
    with pytest.raises(ValueError, match="w_lo <= w_hi"):
        delta_token_weights(h, logps, adv, mask, w_lo=1.3, w_hi=1.2)
    with pytest.raises(ValueError, match="refine_steps"):
        delta_token_weights(h, logps, adv, mask, refine_steps=-1)
    assert DELTA_PAPER_SETTINGS == {"w_lo": 0.8, "w_hi": 1.2, "refine_steps": 1}


def test_weight_stats():
    hidden, logps, advantages, mask = toy_batch()
    out = delta_token_weights(hidden, logps, advantages, mask, refine_steps=0)
    stats = delta_weight_stats(out, mask, advantages)
    w = out.weights[mask.bool()]
    torch.testing.assert_close(stats[:4], torch.stack([w.mean(), w.min(), w.max(), w.std(correction=0)]))
    # posteriors of the 4 signed tokens: σ(2) ≈ 0.88 and 0.5: none at either end
    assert stats[4].item() == 0.0 and stats[5].item() == 0.0
    sharp = delta_token_weights(hidden * 10, logps, advantages, mask, refine_steps=0)  # margins ×100, γ ×100: same
    assert delta_weight_stats(sharp, mask, advantages)[5].item() == 0.0
