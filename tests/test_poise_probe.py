"""POISE's maths (trl_rlvr_ext.losses.poise): hand-computed values, and agreement with step-by-step re-typings (below)
of the authors' functions at holi-lab/POISE@511641e: `core.compute_group_targets_and_cross_baselines`,
`core.regression_diagnostic_values`, `core.cross_rollout_pairwise_sign_matches`, `dp_actor._build_hidden_capture`,
the buffer and refit rule of `domain_estimator_bank`, and `estimator.fit_estimator`'s sklearn pipeline (PCA →
StandardScaler → Ridge, re-typed in numpy from sklearn's definitions: sklearn is not a dependency)."""

import io
from itertools import combinations

import numpy as np
import pytest
import torch

from trl_rlvr_ext.losses import (
    POISE_PAPER_SETTINGS,
    PoiseValueBaseline,
    RidgeProbe,
    poise_advantages,
    poise_bootstrap_advantages,
    poise_diagnostics,
    poise_targets,
    pool_last_n,
)
from trl_rlvr_ext.losses.poise import pca_fit, span_masks, truncate_after_last


# ---------------------------------------------------------------- references: the authors' code, re-typed
def authors_cross_baselines(reward_sums, value_predictions, uid_to_indices, group_size, target_mode):
    # core.compute_group_targets_and_cross_baselines: a loop over the uid groups
    rewards = reward_sums.to(torch.float32)
    predictions = value_predictions.to(torch.float32)
    targets, cross = torch.empty_like(rewards), torch.empty_like(rewards)
    for indices in uid_to_indices.values():
        index = torch.tensor(indices)
        gr, gp = rewards[index], predictions[index]
        cross[index] = (gp.sum() - gp) / float(group_size - 1)
        if target_mode == "other_rollout_correctness":
            targets[index] = (gr.sum() - gr) / float(group_size - 1)
        else:
            targets[index] = gr.mean()
    return targets, cross


def authors_pool_last_n_tokens(hidden_tokens, n, hidden_dim):
    if hidden_tokens.numel() == 0:
        return torch.zeros(hidden_dim, dtype=torch.float32)
    n = max(1, min(int(n), hidden_tokens.size(0)))
    return hidden_tokens[-n:].mean(dim=0).to(torch.float32)


def authors_find_last_subsequence(ids, subsequence):
    if not subsequence or len(ids) < len(subsequence):
        return None
    for start in range(len(ids) - len(subsequence), -1, -1):
        if ids[start : start + len(subsequence)] == subsequence:
            return start + len(subsequence) - 1
    return None


def authors_build_hidden_capture(full_hidden, attention_mask, response_mask, response_ids, n_p, n_r, think_end):
    # dp_actor._build_hidden_capture, one layer for both features
    _, sequence_length, dim = full_hidden.shape
    prompt_length = sequence_length - response_ids.shape[1]
    prompt_rows, response_rows = [], []
    for row in range(full_hidden.shape[0]):
        tokens = full_hidden[row, :prompt_length][attention_mask[row, :prompt_length].bool()]
        prompt_rows.append(authors_pool_last_n_tokens(tokens, n_p, dim))
        valid = response_mask[row].bool()
        tokens = full_hidden[row, prompt_length:][valid]
        end = authors_find_last_subsequence(response_ids[row][valid].tolist(), think_end)
        if end is not None:
            tokens = tokens[: end + 1]
        response_rows.append(authors_pool_last_n_tokens(tokens, n_r, dim))
    return torch.stack(prompt_rows), torch.stack(response_rows)


def authors_regression_diagnostics(predictions, targets):
    p = np.asarray(predictions, dtype=np.float32).reshape(-1)
    t = np.asarray(targets, dtype=np.float32).reshape(-1)
    errors = p - t
    brier = float(np.mean(np.square(errors)))
    constant = float(np.mean(np.square(t - float(t.mean()))))
    skill = float(1.0 - brier / constant) if constant > 1e-12 else 0.0
    ps, ts = float(p.std()), float(t.std())
    pearson = float(np.corrcoef(p, t)[0, 1]) if p.size > 1 and ps > 1e-8 and ts > 1e-8 else 0.0
    return {
        "prediction_mean": float(p.mean()),
        "target_mean": float(t.mean()),
        "target_mae": float(np.mean(np.abs(errors))),
        "target_rmse": float(np.sqrt(brier)),
        "brier_skill": skill,
        "target_bias": float(errors.mean()),
        "target_pearson": pearson,
    }


def authors_pairwise_sign_matches(rewards, predictions, uid_to_indices):
    # core.cross_rollout_pairwise_sign_matches, target_mode="other_rollout_correctness"
    matches = []
    for indices in uid_to_indices.values():
        for a, b in combinations(indices, 2):
            pd = float(predictions[b] - predictions[a])
            rd = float(rewards[a] - rewards[b])
            matches.append(1.0 if np.sign(pd) == np.sign(rd) else 0.0)
    return matches


def sklearn_pipeline_predict(prompt, response, scalars, targets, kp, kr, alpha, clip, new):
    """fit_estimator's PCA(kp), PCA(kr), StandardScaler, Ridge(alpha) and clip, from sklearn's definitions, written
    differently from the module: PCA from the covariance eigenvectors, ridge as an augmented least-squares problem."""

    def pca(x, k):
        if k <= 0:  # the authors' "no projection": the raw features
            return np.zeros(x.shape[1]), np.eye(x.shape[1])
        mean = x.mean(0)
        k = min(k, *x.shape)
        w, v = np.linalg.eigh(np.cov(x - mean, rowvar=False, bias=True))
        order = np.argsort(w)[::-1][:k]
        # in exact arithmetic the training rows project to 0 along a null direction: its column is constant and its
        # ridge weight 0, whatever the direction; leave such directions out
        return mean, v[:, order].T * (w[order] > 1e-10)[:, None]

    (mp, cp), (mr, cr) = pca(prompt, kp), pca(response, kr)

    def features(p, r, s):
        return np.concatenate([(p - mp) @ cp.T, (r - mr) @ cr.T, s], axis=1)

    z = features(prompt, response, scalars)
    mean, var = z.mean(0), z.var(0)
    n, eps = z.shape[0], np.finfo(np.float64).eps
    scale = np.where(var <= n * eps * var + (n * mean * eps) ** 2, 1.0, np.sqrt(var))
    zs = (z - mean) / scale
    zc, yc = zs - zs.mean(0), targets - targets.mean()
    a = np.vstack([zc, np.sqrt(alpha) * np.eye(zc.shape[1])])
    coef = np.linalg.lstsq(a, np.concatenate([yc, np.zeros(zc.shape[1])]), rcond=None)[0]
    intercept = targets.mean() - zs.mean(0) @ coef
    return np.clip(((features(*new) - mean) / scale) @ coef + intercept, *clip)


# ---------------------------------------------------------------- hand-computed values
def authors_bootstrap_advantages(reward_sums, group_size, target_mode):
    """The authors' `_compute_bootstrap_rloo_advantages` (holi-lab/POISE @ 511641e, src/poise/trainer.py), re-typed
    with the groups contiguous: targets from `compute_group_targets_and_cross_baselines` (src/poise/core.py) with zero
    predictions, then reward − target. Returns (advantages, targets)."""
    rewards = reward_sums.to(torch.float32)
    targets = torch.empty_like(rewards)
    for start in range(0, rewards.numel(), group_size):
        group = rewards[start : start + group_size]
        if target_mode == "other_rollout_correctness":
            targets[start : start + group_size] = (group.sum() - group) / float(group_size - 1)
        else:  # "pair_average"
            targets[start : start + group_size] = group.mean()
    return reward_sums.to(torch.float32) - targets, targets


def test_bootstrap_and_cross_baselines_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.25, 0.75])
    # the sibling's reward as the target: RLOO, r_i − r_j
    adv, base, target = poise_bootstrap_advantages(rewards, 2, "other_rollout_correctness")
    assert adv.tolist() == [1.0, -1.0, -0.5, 0.5] and base.tolist() == target.tolist() == [0.0, 1.0, 0.75, 0.25]
    # the pair's mean reward as the target: r_i − (r_i + r_j)/2, half RLOO's
    adv, base, target = poise_bootstrap_advantages(rewards, 2, "pair_average")
    assert adv.tolist() == [0.5, -0.5, -0.25, 0.25] and base.tolist() == target.tolist() == [0.5, 0.5, 0.5, 0.5]
    adv, base, target = poise_advantages(rewards, torch.tensor([0.1, 0.9, 0.2, 0.8]), 2, "other_rollout_correctness")
    torch.testing.assert_close(base, torch.tensor([0.9, 0.1, 0.8, 0.2]))  # the sibling's prediction
    torch.testing.assert_close(adv, torch.tensor([0.1, -0.1, -0.55, 0.55]))
    torch.testing.assert_close(target, torch.tensor([0.0, 1.0, 0.75, 0.25]))  # the sibling's reward
    # G = 3: leave-one-out means (the authors' test_n3_cross_rollout_uses_leave_one_out_means)
    _, base, target = poise_advantages(
        torch.tensor([0.0, 0.5, 1.0]), torch.tensor([0.2, 0.4, 0.9]), 3, "other_rollout_correctness"
    )
    torch.testing.assert_close(target, torch.tensor([0.75, 0.5, 0.25]))
    torch.testing.assert_close(base, torch.tensor([0.65, 0.55, 0.3]))
    assert poise_targets(torch.tensor([1.0, 0.0]), 2, "pair_average").tolist() == [0.5, 0.5]


@pytest.mark.parametrize("target_mode", ["other_rollout_correctness", "pair_average"])
@pytest.mark.parametrize("group_size", [2, 3, 4])
def test_bootstrap_advantages_equal_the_authors(target_mode, group_size):
    """Reward minus the probe's target, in every target mode (0/1 and fractional rewards), to the bit; and what the
    baseline state returns while it bootstraps."""
    g = torch.Generator().manual_seed(group_size)
    for rewards in ((torch.rand(8 * group_size, generator=g) > 0.5).float(), torch.rand(8 * group_size, generator=g)):
        adv, base, target = poise_bootstrap_advantages(rewards, group_size, target_mode)
        ref_adv, ref_target = authors_bootstrap_advantages(rewards, group_size, target_mode)
        torch.testing.assert_close(adv, ref_adv, rtol=0, atol=0)
        torch.testing.assert_close(target, ref_target, rtol=0, atol=0)
        torch.testing.assert_close(base, ref_target, rtol=0, atol=0)
        state = PoiseValueBaseline(group_size, 2, 2, 1.0, 0.0, 1.0, 64, 1, 1, target_mode=target_mode)
        features = [torch.randn(rewards.numel(), 3, generator=g) for _ in range(3)]
        result, predictions = state.advantages(rewards, *features)
        assert predictions is None
        torch.testing.assert_close(result.advantages, ref_adv, rtol=0, atol=0)


def test_pool_last_n_by_hand():
    hidden = torch.arange(12.0).view(1, 6, 2)  # positions (0,1) (2,3) (4,5) (6,7) (8,9) (10,11)
    valid = torch.tensor([[0, 1, 1, 0, 1, 0]])  # valid positions 1, 2, 4
    assert pool_last_n(hidden, valid, 2).tolist() == [[6.0, 7.0]]  # mean of positions 2 and 4
    torch.testing.assert_close(pool_last_n(hidden, valid, 10), torch.tensor([[14 / 3, 17 / 3]]))  # all three
    assert pool_last_n(hidden, torch.zeros(1, 6), 2).tolist() == [[0.0, 0.0]]  # empty: zeros


def test_spans_and_truncation_by_hand():
    # ids: 7 = <think>, 8 = </think>, 5 = <answer>, 6 = </answer>; 0 = padding (invalid)
    ids = torch.tensor([[7, 1, 2, 8, 3, 5, 4, 6, 0], [1, 2, 8, 3, 4, 8, 9, 0, 0], [1, 2, 3, 0, 0, 0, 0, 0, 0]])
    valid = ids != 0
    cut = truncate_after_last(ids, valid, [8])
    assert cut.long().tolist() == [[1, 1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0, 0], valid[2].long().tolist()]
    reasoning, answer = span_masks(ids, valid, ([7], [8]), ([5], [6]))
    assert reasoning.long().tolist()[0] == [0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert answer.long().tolist()[0] == [0, 0, 0, 0, 0, 0, 1, 0, 0]  # inside <answer>…</answer>
    assert reasoning[1].sum() == 0  # no <think>: no reasoning span
    assert answer.long().tolist()[1] == [0, 0, 0, 1, 1, 1, 1, 0, 0]  # after the first </think>
    assert reasoning[2].sum() == 0 and answer[2].sum() == 0


def test_ridge_by_hand():
    # one scalar feature z = [-1, 1] (already standard), y = [0, 1]: w = Σ z·(y − ȳ) / (Σ z² + α) = 1 / (2 + α), b = ȳ
    empty = torch.zeros(2, 0)
    z, y = torch.tensor([[-1.0], [1.0]]), torch.tensor([0.0, 1.0])
    probe = RidgeProbe(0, 0, alpha=2.0, clip_min=0.0, clip_max=1.0).fit(empty, empty, z, y)
    assert probe.fitted["coef"].tolist() == [0.25]
    assert probe.fitted["intercept"].item() == 0.5
    new = torch.tensor([[-1.0], [0.0], [3.0]])
    assert probe.predict(torch.zeros(3, 0), torch.zeros(3, 0), new).tolist() == [0.25, 0.5, 1.0]  # 1.25 clipped
    # a constant feature gets scale 1 (sklearn) and coefficient 0
    zc = torch.tensor([[-1.0, 3.0], [1.0, 3.0]])
    probe = RidgeProbe(0, 0, alpha=2.0, clip_min=0.0, clip_max=1.0).fit(empty, empty, zc, y)
    assert probe.fitted["scale_std"].tolist() == [1.0, 1.0] and probe.fitted["coef"][1] == 0


def test_pca_signs_are_fixed():
    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(0))
    _, components = pca_fit(x, 4)
    largest = components.gather(1, components.abs().argmax(1, keepdim=True))
    assert (largest > 0).all()
    _, flipped = pca_fit(-x, 4)  # the same subspace; the same components after the sign rule
    torch.testing.assert_close(flipped, components)


# ---------------------------------------------------------------- against the authors' code
@pytest.mark.parametrize("group_size", [2, 3, 4])
def test_cross_baselines_match_authors(group_size):
    g = torch.Generator().manual_seed(group_size)
    rewards = (torch.rand(8 * group_size, generator=g) > 0.5).float()
    predictions = torch.rand(8 * group_size, generator=g)
    groups = {f"p{k}": list(range(k * group_size, (k + 1) * group_size)) for k in range(8)}
    for mode in ("other_rollout_correctness", "pair_average"):
        targets, cross = authors_cross_baselines(rewards, predictions, groups, group_size, mode)
        adv, base, ours = poise_advantages(rewards, predictions, group_size, mode)
        torch.testing.assert_close(base, cross, rtol=0, atol=1e-7)
        torch.testing.assert_close(ours, targets, rtol=0, atol=1e-7)
        torch.testing.assert_close(adv, rewards - cross, rtol=0, atol=1e-7)


def test_hidden_pooling_matches_authors():
    g = torch.Generator().manual_seed(1)
    batch, prompt_len, completion_len, dim = 6, 7, 9, 5
    hidden = torch.randn(batch, prompt_len + completion_len, dim, generator=g)
    prompt_mask = torch.ones(batch, prompt_len, dtype=torch.long)
    for row, pad in enumerate([0, 2, 6, 7, 1, 3]):  # left padding, one prompt empty
        prompt_mask[row, :pad] = 0
    response_ids = torch.randint(1, 5, (batch, completion_len), generator=g)
    response_ids[0, 3:5] = torch.tensor([8, 9])  # `</think>` = [8, 9], twice in row 0
    response_ids[0, 6:8] = torch.tensor([8, 9])
    response_ids[1, 7:9] = torch.tensor([8, 9])
    response_mask = torch.ones(batch, completion_len, dtype=torch.long)
    for row, length in enumerate([9, 9, 4, 0, 1, 6]):
        response_mask[row, length:] = 0
    attention = torch.cat([prompt_mask, response_mask], dim=1)
    for n_p, n_r in [(10, 10), (2, 3), (1, 1)]:
        ref_p, ref_r = authors_build_hidden_capture(hidden, attention, response_mask, response_ids, n_p, n_r, [8, 9])
        ours_p = pool_last_n(hidden[:, :prompt_len], prompt_mask, n_p)
        cut = truncate_after_last(response_ids, response_mask, [8, 9])
        ours_r = pool_last_n(hidden[:, prompt_len:], cut, n_r)
        torch.testing.assert_close(ours_p, ref_p, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ours_r, ref_r, rtol=1e-6, atol=1e-6)


def test_diagnostics_match_authors():
    g = torch.Generator().manual_seed(2)
    rewards = (torch.rand(32, generator=g) > 0.4).float()
    predictions = torch.rand(32, generator=g)
    predictions[:3] = 0.0  # some clipped at the bounds and some ties
    predictions[3] = 1.0
    targets = poise_targets(rewards, 2, "other_rollout_correctness")
    ours = poise_diagnostics(rewards, predictions, targets, 2, 0.0, 1.0)
    ref = authors_regression_diagnostics(predictions.numpy(), targets.numpy())
    for name, key in [
        ("pred_mean", "prediction_mean"),
        ("target_mean", "target_mean"),
        ("mae", "target_mae"),
        ("rmse", "target_rmse"),
        ("bias", "target_bias"),
        ("pearson", "target_pearson"),
        ("brier_skill", "brier_skill"),
    ]:
        assert ours[name] == pytest.approx(ref[key], abs=1e-6), name
    groups = {k: [2 * k, 2 * k + 1] for k in range(16)}
    assert ours["pairwise_sign_acc"] == pytest.approx(
        np.mean(authors_pairwise_sign_matches(rewards, predictions, groups))
    )
    assert ours["clip_frac_lo"] == 3 / 32 and ours["clip_frac_hi"] == 1 / 32
    # constant targets: skill undefined (0), Pearson 0
    flat = poise_diagnostics(torch.ones(4), torch.rand(4, generator=g), torch.ones(4), 2, 0.0, 1.0)
    assert flat["brier_skill"] == 0.0 and flat["pearson"] == 0.0


@pytest.mark.parametrize(("rows", "kp", "kr"), [(64, 4, 6), (5, 32, 64), (40, 0, 3)])
def test_probe_matches_the_sklearn_pipeline(rows, kp, kr):
    g = torch.Generator().manual_seed(rows)
    prompt, response = torch.randn(rows, 12, generator=g), torch.randn(rows, 16, generator=g)
    scalars = torch.rand(rows, 3, generator=g)
    targets = (prompt[:, 0] + response[:, 1] > 0).float()
    new = [torch.randn(9, 12, generator=g), torch.randn(9, 16, generator=g), torch.rand(9, 3, generator=g)]
    probe = RidgeProbe(kp, kr, alpha=100.0, clip_min=0.0, clip_max=1.0).fit(prompt, response, scalars, targets)
    # fewer rows than components (5 rows, PCA 32): the components past the rank are zero, not arbitrary
    assert (probe.fitted["prompt_components"].abs().sum(-1) > 0).sum() <= min(rows - 1, 12)
    ref = sklearn_pipeline_predict(
        *(t.double().numpy() for t in (prompt, response, scalars, targets)),
        kp,
        kr,
        100.0,
        (0.0, 1.0),
        [t.double().numpy() for t in new],
    )
    ours = probe.predict_unclipped(*new).clamp(0.0, 1.0)
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-8)


def authors_online_schedule(batches, buffer_rows, warmup, bootstrap, group_size):
    """trainer.fit + RecentDomainBuffer + DomainEstimatorBank.update for one domain: returns, per batch, the phase
    its advantages used, whether a fit ran after it, and the buffer's targets after it."""
    groups, bank_steps, phase, observed, out = [], None, "bootstrap", 0, []

    def trim(groups):
        while groups and sum(len(x) for x in groups) > buffer_rows:
            groups.pop(0)

    for global_step, targets in enumerate(batches, start=1):
        used, fitted = phase, False
        rows = [targets[k : k + group_size] for k in range(0, len(targets), group_size)]
        if phase == "bootstrap":
            groups.extend(rows)
            trim(groups)
            if global_step >= bootstrap:  # _fit_bootstrap_estimators: observed_steps = global_steps
                phase, observed, fitted, bank_steps = "poise", global_step, True, groups
        else:
            bank_steps.extend(rows)
            observed += 1
            trim(bank_steps)
            fitted = observed >= warmup
        out.append((used, fitted, [t for x in (groups if bank_steps is None else bank_steps) for t in x]))
    return out


@pytest.mark.parametrize(("buffer_rows", "warmup", "bootstrap"), [(8, 2, 3), (6, 5, 2), (100, 1, 1)])
def test_buffer_bootstrap_and_refits_follow_the_authors(buffer_rows, warmup, bootstrap):
    g = torch.Generator().manual_seed(buffer_rows)
    state = PoiseValueBaseline(2, 2, 2, 1.0, 0.0, 1.0, buffer_rows, warmup, bootstrap)
    batches = [(torch.rand(4, generator=g) > 0.5).float() for _ in range(8)]
    expected = authors_online_schedule([b.tolist() for b in batches], buffer_rows, warmup, bootstrap, 2)
    for rewards, (phase, fitted, buffer_targets) in zip(batches, expected, strict=True):
        features = [torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g), torch.rand(4, 3, generator=g)]
        result, predictions = state.advantages(rewards, *features)
        assert (predictions is None) == (phase == "bootstrap")
        if predictions is None:
            torch.testing.assert_close(
                result.advantages, authors_bootstrap_advantages(rewards, 2, "other_rollout_correctness")[0]
            )
        # targets are the sibling's reward: the authors' buffer rows hold them in the same order
        assert state.update(*features, result.targets) == fitted
        sibling = [x for k in range(0, len(buffer_targets), 2) for x in buffer_targets[k : k + 2][::-1]]
        assert state.buffer["targets"].tolist() == sibling


def test_state_dict_round_trip_is_exact():
    g = torch.Generator().manual_seed(5)

    def batch():
        return (torch.rand(8, generator=g) > 0.5).float(), [torch.randn(8, 6, generator=g) for _ in range(2)] + [
            torch.rand(8, 3, generator=g)
        ]

    a = PoiseValueBaseline(2, 3, 4, 10.0, 0.0, 1.0, 20, 2, 2)
    for _ in range(3):
        rewards, features = batch()
        a.update(*features, a.advantages(rewards, *features)[0].targets)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = PoiseValueBaseline(2, 3, 4, 10.0, 0.0, 1.0, 20, 2, 2)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    for _ in range(2):
        rewards, features = batch()
        ra, pa = a.advantages(rewards, *features)
        rb, pb = b.advantages(rewards, *features)
        assert torch.equal(ra.advantages, rb.advantages) and torch.equal(pa, pb)
        assert a.update(*features, ra.targets) == b.update(*features, rb.targets)
    assert a.state_dict()["steps"] == b.state_dict()["steps"] == 5
    small = PoiseValueBaseline(2, 3, 4, 10.0, 0.0, 1.0, 4, 2, 2)
    with pytest.raises(ValueError, match="buffer_rows"):
        small.load_state_dict(a.state_dict())


def test_refusals():
    with pytest.raises(ValueError, match="at least 2 rollouts"):
        poise_bootstrap_advantages(torch.ones(3), 1, "other_rollout_correctness")
    with pytest.raises(ValueError, match="grouped contiguously"):
        poise_advantages(torch.ones(3), torch.ones(3), 2, "other_rollout_correctness")
    with pytest.raises(ValueError, match="target_mode"):
        poise_targets(torch.ones(2), 2, "mean")
    with pytest.raises(RuntimeError, match="not been fitted"):
        RidgeProbe(1, 1, 1.0, 0.0, 1.0).predict(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 3))
    with pytest.raises(ValueError, match="at least one group"):
        PoiseValueBaseline(2, buffer_rows=1)
    assert POISE_PAPER_SETTINGS["num_generations"] == 2
