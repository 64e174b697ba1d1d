"""RSI-S (trl_rlvr_ext.losses.rsi): hand-computed values, the selection's edges, and the identities that make RSI the
ratio the abstract describes (checked by autograd on random logits)."""

import math

import pytest
import torch

from trl_rlvr_ext.losses import (
    RSI_COUNT_NAMES,
    relative_surprisal_index,
    rsi_interval_mask,
    rsi_quantile_bounds,
    rsi_selection_counts,
)


def _entropy(probs):
    return -sum(p * math.log(p) for p in probs if p > 0)


def test_rsi_by_hand():
    """Two distributions written out: [0.5, 0.25, 0.25] (H = 1.5 ln 2) and [0.9, 0.1]."""
    h1, h2 = _entropy([0.5, 0.25, 0.25]), _entropy([0.9, 0.1])
    logps = torch.tensor([[math.log(0.5), math.log(0.25), math.log(0.9), math.log(0.1)]])
    entropies = torch.tensor([[h1, h1, h2, h2]])
    rsi = relative_surprisal_index(logps, entropies, torch.ones(1, 4))
    # ln 2 / (1.5 ln 2) = 2/3, 2 ln 2 / (1.5 ln 2) = 4/3; H([0.9, 0.1]) = 0.32508: 0.10536 / H and 2.30259 / H
    # (a sharp distribution's argmax is below 1, its tail far above)
    expected = [2 / 3, 4 / 3, -math.log(0.9) / h2, -math.log(0.1) / h2]
    torch.testing.assert_close(rsi, torch.tensor([expected]), rtol=1e-6, atol=0)
    assert expected[2] == pytest.approx(0.3241, abs=1e-4) and expected[3] == pytest.approx(7.0831, abs=1e-4)
    assert rsi.dtype == torch.float32 and not rsi.requires_grad


def test_rsi_is_zero_outside_the_mask_and_where_the_entropy_vanishes():
    logps = torch.tensor([[-0.5, -1e-9, -3.0, -2.0]], requires_grad=True)
    entropies = torch.tensor([[1.0, 1e-9, 1e-12, 2.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    rsi = relative_surprisal_index(logps, entropies, mask)
    # H = 1e-9 > eps = 1e-8? no: both the second and the third positions have H <= 1e-8 -> 0; the fourth is padding
    assert rsi.tolist() == [[0.5, 0.0, 0.0, 0.0]]
    # a smaller eps makes the second position defined: 1e-9 / 1e-9 = 1
    rsi = relative_surprisal_index(logps, entropies, mask, eps=1e-10)
    assert rsi[0, :2].tolist() == pytest.approx([0.5, 1.0])
    assert rsi[0, 2].item() == 0.0  # H = 1e-12 is still below eps


def test_rsi_refuses_mismatched_shapes_and_bad_eps():
    with pytest.raises(ValueError, match="same shape"):
        relative_surprisal_index(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="eps must be >= 0"):
        relative_surprisal_index(torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), eps=-1.0)


def test_interval_mask_inclusive_bounds_and_open_sides():
    rsi = torch.tensor([[0.1, 0.5, 1.0, 2.0, 3.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    assert rsi_interval_mask(rsi, mask, 0.5, 2.0).tolist() == [[False, True, True, True, False, False]]
    assert rsi_interval_mask(rsi, mask, low=1.0).tolist() == [[False, False, True, True, True, False]]
    assert rsi_interval_mask(rsi, mask, high=0.5).tolist() == [[True, True, False, False, False, False]]
    assert rsi_interval_mask(rsi, mask).tolist() == [[True] * 5 + [False]]  # padding is never kept
    with pytest.raises(ValueError, match="empty"):
        rsi_interval_mask(rsi, mask, 2.0, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        rsi_interval_mask(rsi, mask, float("nan"), 1.0)


def test_quantile_bounds_by_hand():
    pool = torch.tensor([4.0, 0.0, 1.0, 3.0, 2.0])  # sorted 0..4: the q-quantile is 4q (linear interpolation)
    low, high = rsi_quantile_bounds(pool, 0.25, 0.9)
    assert (low.item(), high.item()) == (1.0, pytest.approx(3.6))
    low, high = rsi_quantile_bounds(pool, None, 0.5)
    assert low is None and high.item() == 2.0
    # an empty pool keeps nothing on the sides asked for
    low, high = rsi_quantile_bounds(torch.zeros(0), 0.1, 0.9)
    assert rsi_interval_mask(torch.ones(1, 2), torch.ones(1, 2), low, high).sum() == 0
    with pytest.raises(ValueError, match=r"q_high must be in \[0, 1\]"):
        rsi_quantile_bounds(pool, 0.1, 1.5)
    with pytest.raises(ValueError, match="empty"):
        rsi_quantile_bounds(pool, 0.8, 0.2)


def test_selection_counts_by_hand():
    rsi = torch.tensor([[0.1, 0.8, 1.5, 4.0], [0.2, 0.9, 5.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    keep = rsi_interval_mask(rsi, mask, 0.5, 3.0)
    counts = rsi_selection_counts(rsi, keep, mask, torch.tensor([1.0, -0.5]), 0.5, 3.0)
    values = dict(zip(RSI_COUNT_NAMES, counts.tolist(), strict=True))
    assert values == {
        "tokens": 7,
        "kept": 3,  # 0.8, 1.5 | 0.9
        "dropped_low": 2,  # 0.1 | 0.2
        "dropped_high": 2,  # 4.0 | 5.0
        "pos_tokens": 4,
        "pos_kept": 2,
        "neg_tokens": 3,
        "neg_kept": 1,
        "rsi_sum": pytest.approx(0.1 + 0.8 + 1.5 + 4.0 + 0.2 + 0.9 + 5.0),
        "kept_sequences": 2,
        "sequences": 2,
    }
    assert counts.dtype == torch.float64
    # per-token advantages (B, T), an open upper side: nothing is dropped high
    per_token = torch.tensor([[1.0, 1.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    keep = rsi_interval_mask(rsi, mask, low=0.5)
    values = dict(zip(RSI_COUNT_NAMES, rsi_selection_counts(rsi, keep, mask, per_token, 0.5).tolist(), strict=True))
    assert (values["dropped_high"], values["pos_tokens"], values["pos_kept"], values["neg_kept"]) == (0, 2, 1, 1)


@pytest.mark.parametrize("vocab", [7, 50, 1000])
def test_the_gradient_identities_that_make_rsi_the_abstracts_ratio(vocab):
    """For logits z and the sampled token k: ∂ ln H/∂z_k = p_k (RSI − 1) and ∂ ln ‖e_k − p‖/∂z_k = −p_k, so their
    ratio is 1 / (1 − RSI). Autograd on random logits, in float64; a wrong RSI (e.g. s·H or log p / H) fails."""
    generator = torch.Generator().manual_seed(vocab)
    for _ in range(6):
        z = (torch.randn(vocab, generator=generator, dtype=torch.float64) * 2.0).requires_grad_()
        k = int(torch.randint(vocab, (1,), generator=generator))
        logp = torch.log_softmax(z, -1)
        p = logp.exp()
        entropy = -(p * logp).sum()
        rsi = relative_surprisal_index(logp[k].view(1, 1), entropy.view(1, 1), torch.ones(1, 1)).double().item()
        (d_log_entropy,) = torch.autograd.grad(entropy.log(), z, retain_graph=True)
        gradient_norm = (torch.nn.functional.one_hot(torch.tensor(k), vocab).double() - p).norm()
        (d_log_norm,) = torch.autograd.grad(gradient_norm.log(), z)
        p_k = p[k].item()
        assert d_log_entropy[k].item() == pytest.approx(p_k * (rsi - 1), rel=1e-5, abs=1e-12)
        assert d_log_norm[k].item() == pytest.approx(-p_k, rel=1e-9)
        assert d_log_norm[k].item() / d_log_entropy[k].item() == pytest.approx(1 / (1 - rsi), rel=1e-5)
