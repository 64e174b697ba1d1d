"""RELEX's maths (trl_rlvr_ext.extrapolation.relex): hand-computed subspaces and fits, and a numpy re-implementation
of the authors' functions (weizhepei/RELEX@e4548ba scripts/svd_extrapolation.py: `compute_svd`, `fit_linear` and the
extrapolate / reconstruct / fit_reconstruct branches of `main`) as the reference."""

import math

import numpy as np
import pytest
import torch

from trl_rlvr_ext.extrapolation.relex import (
    AUTHORS_STEP_SCALING,
    RELEX_PAPER_SETTINGS,
    extrapolation_position,
    fit_axis_step,
    history_spacing,
    relex_coefficients,
    relex_extrapolate,
    relex_fit_r2,
    relex_fit_reconstruct,
    relex_linear_fit,
    relex_reconstruct,
    relex_subspace,
    summarize_reports,
)


# ---------------------------------------------------------------- the authors' procedure (our transcription)
def authors_svd(M, rank):
    """The Gram-trick SVD as the authors' code runs it, in numpy float32: G = M Mᵀ, eigh, eigenpairs sorted
    descending, explained = sum of the top-r positive eigenvalues over the sum of all positive ones, S = sqrt of the
    clamped top-r eigenvalues, V = Mᵀ U / S with a column set to 0 when its S is not above 1e-6·S[0] (1e-12 if S[0]
    is 0). Returns V, S, U, explained."""
    T = M.shape[0]
    r = min(rank, T)
    values, vectors = np.linalg.eigh(M @ M.T)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    total = np.sum(np.maximum(values, 0))
    explained = np.sum(np.maximum(values[:r], 0)) / total if total > 0 else 0.0
    U = vectors[:, :r]
    S = np.sqrt(np.maximum(values[:r], 0))
    V = M.T @ U
    for k in range(r):
        if S[k] > (S[0] * 1e-6 if S[0] > 0 else 1e-12):
            V[:, k] /= S[k]
        else:
            V[:, k] = 0.0
    return V, S, U, explained


def authors_fit_linear(C):
    """OLS per column in float64 on t = 0 .. T-1: slope = sum((t - mean t)(y - mean y)) / sum((t - mean t)^2)."""
    t = np.arange(C.shape[0], dtype=np.float64)
    tc = t - t.mean()
    slopes = np.array(
        [np.sum(tc * (C[:, k].astype(np.float64) - C[:, k].mean())) / np.sum(tc**2) for k in range(C.shape[1])]
    )
    intercepts = np.array([C[:, k].astype(np.float64).mean() - slopes[k] * t.mean() for k in range(C.shape[1])])
    return slopes, intercepts


def authors_extrapolate(M, last_step, targets, rank, window=-1, scaling=1.0):
    """The extrapolate branch (linear fit, fit once): C row by row as delta_row @ V; the last W rows fitted;
    target_t = W - 1 + (round(label * scaling) - last history step); delta = (slope t + intercept) as float32 @ Vᵀ."""
    V, _S, _U, explained = authors_svd(M, rank)
    C = np.stack([M[i] @ V for i in range(M.shape[0])]).astype(np.float32)
    W = M.shape[0] if window == -1 else min(window, M.shape[0])
    slopes, intercepts = authors_fit_linear(C[-W:])
    out = {}
    for label in targets:
        t = W - 1 + (round(label * scaling) - last_step)
        out[label] = (slopes * t + intercepts).astype(np.float32) @ V.T
    return out, explained


def authors_reconstruct(M, history_steps, rows, rank):
    """The reconstruct branch: c = U[pos] * S for a history step, else delta @ V; delta_lr = c @ Vᵀ."""
    V, S, U, _ = authors_svd(M, rank)
    pos = {s: k for k, s in enumerate(history_steps)}
    out = {}
    for step, row in rows.items():
        c = (U[pos[step]] * S).astype(np.float32) if step in pos else row @ V
        out[step] = (c @ V.T).astype(np.float32)
    return out


def authors_fit_reconstruct(M, history_steps, targets, rank):
    """The fit_reconstruct branch: fit on all history coefficients, predict at each target's history position."""
    V, _S, _U, _ = authors_svd(M, rank)
    C = np.stack([M[i] @ V for i in range(M.shape[0])]).astype(np.float32)
    slopes, intercepts = authors_fit_linear(C)
    pos = {s: k for k, s in enumerate(history_steps)}
    return {s: (slopes * float(pos[s]) + intercepts).astype(np.float32) @ V.T for s in targets}


def _trajectory(T=30, d=5000, noise=0.05, seed=0):
    """A near-linear trajectory, as RL trajectories look in the paper: Δ_t = t·a + √t·b/3 + sin(t)·c/10 + noise, so
    the top three singular values are well apart (their directions are well defined in float32)."""
    g = torch.Generator().manual_seed(seed)
    a, b, c = torch.randn(3, d, generator=g)
    t = torch.arange(1, T + 1, dtype=torch.float32)[:, None]
    clean = t * a + t.sqrt() * b / 3 + torch.sin(t) * c / 10
    return ((clean + noise * torch.randn(T, d, generator=g)) * 1e-3).float()


# ---------------------------------------------------------------- hand-computed values
def test_hand_computed_rank_one_subspace_and_fit():
    # rows t·[3, 4]: rank 1, direction [0.6, 0.8], coefficients 5t, all the variance in one direction
    M = torch.tensor([[3.0, 4.0], [6.0, 8.0], [9.0, 12.0]])
    sub = relex_subspace(M, 1)
    assert sub.explained == pytest.approx(1.0)
    assert float(sub.S[0]) == pytest.approx(5 * math.sqrt(1 + 4 + 9), rel=1e-6)  # ||M||_F = 5·√14
    v = sub.V[:, 0] * torch.sign(sub.V[0, 0])
    torch.testing.assert_close(v, torch.tensor([0.6, 0.8]))
    C = relex_coefficients(M, sub) * torch.sign(sub.V[0, 0])
    torch.testing.assert_close(C[:, 0], torch.tensor([5.0, 10.0, 15.0]))
    slopes, intercepts = relex_linear_fit(torch.tensor([[5.0], [10.0], [15.0]]))
    assert slopes.tolist() == [5.0] and intercepts.tolist() == [5.0] and slopes.dtype == torch.float64
    # steps 1, 2, 3 -> step 10 is τ* = 2 + 7 = 9: c = 5·9 + 5 = 50, Δ̂ = 50·[0.6, 0.8] = 10·[3, 4]
    predictions, report = relex_extrapolate(M, [1, 2, 3], [10])
    torch.testing.assert_close(predictions[10], torch.tensor([30.0, 40.0]))
    assert report["r2"] == pytest.approx([1.0]) and report["explained_variance"] == pytest.approx(1.0)


def test_hand_computed_explained_share_and_cutoff():
    # orthogonal rows of norms 3 and 1: eigenvalues 9 and 1 -> rank 1 explains 0.9
    M = torch.tensor([[3.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    sub = relex_subspace(M, 1)
    assert sub.explained == pytest.approx(0.9) and float(sub.S[0]) == pytest.approx(3.0)
    assert relex_subspace(M, 5).rank == 2  # capped at T
    assert relex_subspace(M, 2).explained == pytest.approx(1.0)
    # a tensor that never moved: explained 0, V = 0, a zero prediction (not NaN)
    still = relex_subspace(torch.zeros(4, 6), 1)
    assert still.explained == 0.0 and torch.equal(still.V, torch.zeros(6, 1))
    predictions, _ = relex_extrapolate(torch.zeros(4, 6), [1, 2, 3, 4], [9])
    assert torch.equal(predictions[9], torch.zeros(6))
    # a second direction 1e-7 of the first is dropped (S_2 <= 1e-6·S_1), as the authors do
    tiny = relex_subspace(torch.tensor([[1.0, 0.0], [0.0, 1e-7]]), 2)
    assert torch.equal(tiny.V[:, 1], torch.zeros(2))


def test_hand_computed_fit_with_intercept_and_r2():
    # c = [1, 2, 4]: τ̄ = 1, c̄ = 7/3, slope = ((−1)(−4/3) + 0 + 1·(5/3)) / 2 = 1.5, intercept = 7/3 − 1.5 = 5/6
    C = torch.tensor([[1.0], [2.0], [4.0]])
    slopes, intercepts = relex_linear_fit(C)
    assert slopes.item() == pytest.approx(1.5) and intercepts.item() == pytest.approx(5 / 6)
    # fitted [5/6, 7/3, 23/6]: residuals [1/6, −1/3, 1/6], SS_res = 1/6; SS_tot = 14/3 → R² = 1 − 1/28
    assert relex_fit_r2(C, slopes, intercepts).item() == pytest.approx(1 - 1 / 28)
    constant = torch.tensor([[2.0], [2.0]])
    assert relex_fit_r2(constant, *relex_linear_fit(constant)).item() == 1.0  # SS_tot = 0: the authors' 1.0
    with pytest.raises(ValueError, match="at least 2 history steps"):
        relex_linear_fit(torch.tensor([[1.0]]))


def test_positions_spacing_and_step_scaling():
    assert extrapolation_position(200, list(range(1, 76)), -1) == 74 + 125  # the authors' τ*
    assert extrapolation_position(500, list(range(1, 76)), -1, step_scaling=2.0) == 74 + 925
    assert extrapolation_position(100, list(range(1, 76)), 10) == 9 + 25  # a window: positions in the window
    # recorded every 5 steps: τ counts positions, so a step ahead is 1/5 of a position
    assert extrapolation_position(100, [5, 10, 15, 20], -1) == 3 + 80 / 5
    assert history_spacing([7]) == 1 and history_spacing([4, 8, 12]) == 4
    with pytest.raises(ValueError, match="not uniformly spaced"):
        history_spacing([1, 2, 4])
    assert fit_axis_step(3, 0.5) == 2 and fit_axis_step(5, 0.5) == 2  # Python's round, as the authors' int(round())
    with pytest.raises(ValueError, match="step_scaling must be > 0"):
        fit_axis_step(3, 0.0)
    assert AUTHORS_STEP_SCALING == {"Qwen2.5-Math-1.5B": 2.0} and RELEX_PAPER_SETTINGS["step_scaling"] == 1.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="rank must be an integer >= 1"):
        relex_subspace(torch.ones(2, 3), 0)
    with pytest.raises(ValueError, match=r"\(T, d\) matrix"):
        relex_subspace(torch.ones(3), 1)
    with pytest.raises(ValueError, match="window must be -1"):
        relex_extrapolate(torch.ones(3, 2), [1, 2, 3], [5], window=1)
    with pytest.raises(ValueError, match="3 delta rows for 2 history steps"):
        relex_extrapolate(torch.ones(3, 2), [1, 2], [5])
    with pytest.raises(ValueError, match="history steps only"):
        relex_fit_reconstruct(torch.ones(3, 2), [1, 2, 3], [4])
    with pytest.raises(ValueError, match="needs the recorded delta of step 9"):
        relex_reconstruct(torch.ones(3, 2), [1, 2, 3], {9: None})


# ---------------------------------------------------------------- against the authors' procedure
@pytest.mark.parametrize("rank,window,scaling", [(1, -1, 1.0), (1, 10, 1.0), (3, -1, 1.0), (1, -1, 2.0), (2, 7, 2.0)])
def test_extrapolate_matches_the_authors(rank, window, scaling):
    M = _trajectory()
    steps = list(range(1, 31))
    ours, report = relex_extrapolate(M, steps, [31, 100, 200], rank=rank, window=window, step_scaling=scaling)
    theirs, explained = authors_extrapolate(M.numpy(), 30, [31, 100, 200], rank, window, scaling)
    assert report["explained_variance"] == pytest.approx(float(explained), rel=1e-5)
    for label in theirs:
        expected = torch.from_numpy(theirs[label])
        scale = expected.abs().max()
        assert (ours[label] - expected).abs().max() <= 1e-5 * scale, label  # sign ambiguity of V cancels


def test_reconstruct_and_fit_reconstruct_match_the_authors():
    full = _trajectory(T=40, d=3000, noise=0.3, seed=1)
    steps = list(range(1, 41))
    M = full[:30]
    rows = {5: None, 30: None, 35: full[34], 40: full[39]}  # history steps (U·S) and later recorded steps (Δ·V)
    ours, _ = relex_reconstruct(M, steps[:30], rows, rank=2)
    theirs = authors_reconstruct(
        M.numpy(), steps[:30], {s: None if r is None else r.numpy() for s, r in rows.items()}, 2
    )
    for step in rows:
        expected = torch.from_numpy(theirs[step])
        assert (ours[step] - expected).abs().max() <= 1e-5 * expected.abs().max(), step
    ours, report = relex_fit_reconstruct(M, steps[:30], [1, 15, 30], rank=1)
    theirs = authors_fit_reconstruct(M.numpy(), steps[:30], [1, 15, 30], 1)
    for step in theirs:
        expected = torch.from_numpy(theirs[step])
        assert (ours[step] - expected).abs().max() <= 1e-5 * expected.abs().max(), step
    assert 0.9 < report["r2"][0] <= 1.0


def test_rank_one_recovers_a_linear_trajectory_far_ahead():
    """The paper's regime: a line in one direction plus noise, observed for 30 steps, predicted at 300 (10x)."""
    d = 4000
    g = torch.Generator().manual_seed(3)
    direction = torch.randn(d, generator=g)
    truth = lambda s: s * 1e-3 * direction  # noqa: E731
    M = torch.stack([truth(s) + 2e-4 * torch.randn(d, generator=g) for s in range(1, 31)])
    predictions, report = relex_extrapolate(M, list(range(1, 31)), [300])
    error = (predictions[300] - truth(300)).norm() / truth(300).norm()
    naive = (M[-1] * 10 - truth(300)).norm() / truth(300).norm()  # the last delta times 300/30: noise × 10
    assert error < 0.005 and error < naive / 2 and report["explained_variance"] > 0.9


def test_summary_over_tensors():
    reports = [
        {"explained_variance": 1.0, "singular_values": [1.0], "r2": [0.5]},
        {"explained_variance": 0.92, "singular_values": [1.0], "r2": [0.9]},
        {"explained_variance": 0.5, "singular_values": [1.0], "r2": [1.0]},
    ]
    summary = summarize_reports(reports)
    assert summary["relex/explained_mean"] == pytest.approx(2.42 / 3)
    assert summary["relex/explained_median"] == pytest.approx(0.92) and summary["relex/explained_min"] == 0.5
    assert summary["relex/frac_explained_ge_0.9"] == pytest.approx(2 / 3)
    assert summary["relex/frac_explained_ge_0.99"] == pytest.approx(1 / 3)
    assert summary["relex/r2_median"] == pytest.approx(0.9) and summary["relex/tensors"] == 3
    no_fit = summarize_reports([{**r, "r2": None} for r in reports])
    assert "relex/r2_mean" not in no_fit
