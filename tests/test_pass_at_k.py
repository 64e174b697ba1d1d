"""The unbiased pass@k, pass^k and maj@k estimators against brute-force enumeration, errors, stability, bootstrap
intervals, and the `evaluate` module."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from trl_rlvr_ext.evaluation import (
    PASS_AT_K_METRIC_PATH,
    answer_classes,
    bootstrap_intervals,
    counts_from_correctness,
    default_ks,
    maj_at_k,
    pass_at_k,
    pass_at_k_curve,
    pass_hat_k,
    pass_metrics,
)


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (the first c correct) that contain a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_matches_brute_force_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            expected = brute_force_pass_at_k(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_vectorised_over_problems_with_different_n():
    n = np.array([8, 5, 3, 8, 6])
    c = np.array([0, 2, 3, 7, 1])
    got = pass_at_k(n, c, 3)
    assert got.shape == (5,)
    expected = [brute_force_pass_at_k(int(a), int(b), 3) for a, b in zip(n, c)]
    np.testing.assert_allclose(got, expected, atol=1e-12)
    # a scalar n broadcasts against per-problem c
    np.testing.assert_allclose(pass_at_k(6, [0, 1, 6], 2), [0.0, 1 / 3, 1.0])


def test_closed_forms():
    # pass@1 is the sample accuracy c / n; pass@n is 1 iff any sample is correct
    n, c = np.array([10, 10, 10]), np.array([0, 3, 10])
    np.testing.assert_allclose(pass_at_k(n, c, 1), c / n)
    np.testing.assert_array_equal(pass_at_k(n, c, 10), [0.0, 1.0, 1.0])
    # 1 - C(n-c, k) / C(n, k) with exact integers
    assert pass_at_k(20, 4, 5) == pytest.approx(1 - math.comb(16, 5) / math.comb(20, 5), rel=1e-14)


# Re-typed from openai/human-eval@6d43fb9, human_eval/evaluation.py, `estimate_pass_at_k` (the numpy snippet of Chen
# et al. 2021): per problem, 1.0 when n - c < k, else 1 - prod(1 - k / arange(n - c + 1, n + 1)).
def human_eval_estimate_pass_at_k(num_samples, num_correct, k):
    def estimator(n, c, k):
        if n - c < k:
            return 1.0
        return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))

    if isinstance(num_samples, int):
        num_samples = [num_samples] * len(num_correct)
    assert len(num_samples) == len(num_correct)
    return np.array([estimator(int(n), int(c), k) for n, c in zip(num_samples, num_correct)])


def test_equals_human_evals_estimator():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 400, size=600)
    c = rng.integers(0, n + 1)
    for k in [1, 2, 3, 10, 64, 256]:
        has_k = n >= k  # theirs answers k > n too; ours refuses it (below)
        ours = pass_at_k(n[has_k], c[has_k], k)
        np.testing.assert_array_equal(ours, human_eval_estimate_pass_at_k(n[has_k], c[has_k], k))  # to the bit
    np.testing.assert_array_equal(pass_at_k(50, c[:20] % 51, 7), human_eval_estimate_pass_at_k(50, c[:20] % 51, 7))
    # The departure: with k > n theirs returns 1.0 (n - c < k holds), even for a problem with no correct sample
    assert human_eval_estimate_pass_at_k([4], [0], 5).tolist() == [1.0]
    with pytest.raises(ValueError, match="undefined"):
        pass_at_k(4, 0, 5)


def test_k_larger_than_n_is_an_error_not_one():
    with pytest.raises(ValueError, match="undefined"):
        pass_at_k(4, 4, 5)
    with pytest.raises(ValueError, match=r"problems \[1\]"):
        pass_at_k([8, 4], [1, 1], 5)


@pytest.mark.parametrize(
    "n, c, k, match",
    [
        (4, 5, 1, "num_correct"),
        (4, -1, 1, "num_correct"),
        (0, 0, 1, "num_samples"),
        (4, 1, 0, "positive"),
        (4, 1, 1.5, "positive"),
        (4, 1.5, 1, "integers"),
    ],
)
def test_bad_inputs_are_errors(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_stable_at_n_2000():
    n = 2000
    for c in [1, 7, 100, 1000, 1999]:
        for k in [1, 2, 64, 512, 1024, 2000]:
            exact = 1 - math.comb(n - c, k) / math.comb(n, k)  # exact integers, one rounding at the end
            got = float(pass_at_k(n, c, k))
            assert math.isfinite(got) and 0.0 <= got <= 1.0
            assert got == pytest.approx(exact, rel=1e-9, abs=1e-12), (c, k)
    # the naive float formula overflows here; the product form does not
    with np.errstate(over="ignore"):
        assert not math.isfinite(float(np.prod(np.arange(1, 2001, dtype=np.float64))))
    # many problems at once, monotone in k and in c
    curve = [float(pass_at_k(n, 10, k)) for k in default_ks(n)]
    assert all(a < b for a, b in itertools.pairwise(curve))
    by_c = pass_at_k(n, np.arange(0, n + 1, 50), 16)
    assert np.all(np.diff(by_c) >= 0)


def test_default_ks_and_curve():
    assert default_ks(1) == [1]
    assert default_ks(8) == [1, 2, 4, 8]
    assert default_ks(12) == [1, 2, 4, 8, 12]
    curve = pass_at_k_curve([4, 4], [1, 0])
    assert list(curve) == [1, 2, 4]
    assert curve[1] == pytest.approx(0.125) and curve[4] == pytest.approx(0.5)


def test_counts_from_correctness():
    n, c = counts_from_correctness([[True, False, True], [False], [True, True]])
    assert n.tolist() == [3, 1, 2] and c.tolist() == [2, 0, 2]


def test_evaluate_module_loads_offline_from_the_package():
    evaluate = pytest.importorskip("evaluate")
    metric = evaluate.load(PASS_AT_K_METRIC_PATH)
    predictions = [[True, False, False, True], [False, False, False, False], [True, True, True, False]]
    result = metric.compute(predictions=predictions, k=[1, 2, 4])
    n, c = counts_from_correctness(predictions)
    for k in (1, 2, 4):
        assert result[f"pass@{k}"] == pytest.approx(float(pass_at_k(n, c, k).mean()))
    # add/compute works too, and k > n is an error there as well
    for p in predictions:
        metric.add(predictions=p)
    assert metric.compute(k=2)["pass@2"] == pytest.approx(result["pass@2"])
    with pytest.raises(ValueError, match="undefined"):
        metric.compute(predictions=predictions, k=8)


def test_one_curve_definition_serves_the_evaluator_and_the_callback():
    from trl_rlvr_ext.evaluation import curve_from_counts, pass_at_k_curve

    assert curve_from_counts is pass_at_k_curve
    with pytest.raises(ValueError, match="no problems"):
        pass_at_k_curve([], [])


# --- pass^k -------------------------------------------------------------------------------------------------------


def brute_force_pass_hat_k(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (the first c correct) whose samples are all correct."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(all(i < c for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_hat_k_matches_brute_force_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_hat_k(n, c, k) == pytest.approx(brute_force_pass_hat_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_hat_k_hand_values_and_relations():
    # C(3, 2) / C(4, 2) = 3 / 6; C(2, 2) / C(4, 2) = 1 / 6; fewer than k correct gives 0; all correct gives 1
    np.testing.assert_allclose(pass_hat_k(4, [3, 2, 1, 4], 2), [0.5, 1 / 6, 0.0, 1.0], atol=1e-15)
    assert pass_hat_k(20, 15, 5) == pytest.approx(math.comb(15, 5) / math.comb(20, 5), rel=1e-14)
    n = np.full(9, 8)
    c = np.arange(9)
    # pass^1 = pass@1 = c / n; pass^n is 1 only when every sample is correct
    np.testing.assert_allclose(pass_hat_k(n, c, 1), c / 8)
    np.testing.assert_array_equal(pass_hat_k(n, c, 8), (c == 8).astype(float))
    previous = pass_hat_k(n, c, 1)
    for k in range(2, 9):
        current = pass_hat_k(n, c, k)
        # drawing without replacement: all-correct is rarer than with replacement, (c/n)^k, itself <= pass@1 <= pass@k
        assert np.all(current <= (c / 8) ** k + 1e-15)
        assert np.all(current <= previous) and np.all(current <= pass_at_k(n, c, k))
        previous = current


def test_pass_hat_k_stable_and_checked():
    for c in [1, 64, 1000, 1999, 2000]:
        for k in [1, 2, 64, 1024, 2000]:
            exact = math.comb(c, k) / math.comb(2000, k)  # exact integers, one rounding at the end
            got = float(pass_hat_k(2000, c, k))
            assert math.isfinite(got) and got == pytest.approx(exact, rel=1e-9, abs=1e-300), (c, k)
    with pytest.raises(ValueError, match=r"pass\^5 is undefined"):
        pass_hat_k(4, 4, 5)
    with pytest.raises(ValueError, match="num_correct"):
        pass_hat_k(4, 5, 1)


# --- maj@k --------------------------------------------------------------------------------------------------------


def brute_force_maj_at_k(answers, correct, k: int) -> float:
    """Average over every k-subset: votes by answer (None abstains); the majority answer drawn uniformly among the
    tied ones, then a sample of that answer drawn uniformly from the subset; the credit is that sample's correctness."""
    total, subsets = 0.0, list(itertools.combinations(range(len(answers)), k))
    for subset in subsets:
        votes = Counter(answers[i] for i in subset if answers[i] is not None)
        if not votes:
            continue
        top = max(votes.values())
        winners = [a for a, v in votes.items() if v == top]
        for answer in winners:
            members = [i for i in subset if answers[i] == answer]
            total += sum(correct[i] for i in members) / len(members) / len(winners)
    return total / len(subsets)


def test_maj_at_k_matches_brute_force_on_every_small_vote_pattern():
    # every assignment of up to 3 answers (or none) to n <= 6 samples, with "a" the right answer
    for n in range(1, 7):
        for answers in itertools.product([None, "a", "b", "c"], repeat=n):
            if answers.count("b") < answers.count("c"):
                continue  # the mirror image of another pattern
            correct = [a == "a" for a in answers]
            classes = answer_classes(answers, correct)
            for k in range(1, n + 1):
                expected = brute_force_maj_at_k(answers, correct, k)
                assert maj_at_k([classes], n, k)[0] == pytest.approx(expected, abs=1e-12), (answers, k)


def test_maj_at_k_matches_brute_force_with_mixed_correctness_within_an_answer():
    # a grader may disagree with the extracted answer (a format check, say): a class with c_a of n_a correct
    rng = np.random.default_rng(0)
    for _ in range(60):
        n = int(rng.integers(1, 10))
        answers = [None if x == 0 else "abcd"[x - 1] for x in rng.integers(0, 5, size=n)]
        correct = rng.random(n) < 0.5
        classes = answer_classes(answers, correct.tolist())
        for k in range(1, n + 1):
            expected = brute_force_maj_at_k(answers, correct.tolist(), k)
            assert maj_at_k([classes], n, k)[0] == pytest.approx(expected, abs=1e-12)


def test_maj_at_k_hand_values():
    # (to 1e-12: the dynamic program works with log-binomials, so hand values hold to float rounding, not bit for bit)
    # "7" twice (right), "9" once (wrong), one unanswered, k = 2: of the 6 pairs, {7,7}, {7,-} x 2 count 1, the
    # ties {7,9} x 2 count 1/2 each, {9,-} counts 0: 4 / 6
    assert maj_at_k([[(2, 2), (1, 0)]], 4, 2)[0] == pytest.approx(2 / 3, abs=1e-12)
    # an even split between a right and a wrong answer, k = n = 2: a tie, half credit
    assert maj_at_k([[(1, 1), (1, 0)]], 2, 2)[0] == pytest.approx(0.5, abs=1e-12)
    # 3 right vs 2 wrong, k = n = 5: the right answer wins outright; k = 1 is the share of right samples
    assert maj_at_k([[(3, 3), (2, 0)]], 5, 5)[0] == pytest.approx(1.0, abs=1e-12)
    assert maj_at_k([[(3, 3), (2, 0)]], 5, 1)[0] == pytest.approx(0.6, abs=1e-12)
    # nothing answered: no majority, 0; one sample answered (right) among 4: maj@k = pass@k of that sample
    np.testing.assert_array_equal(maj_at_k([[]], 4, 2), [0.0])
    for k in range(1, 5):
        assert maj_at_k([[(1, 1)]], 4, k)[0] == pytest.approx(float(pass_at_k(4, 1, k)), abs=1e-12)


def test_maj_at_one_is_the_share_of_answered_correct_samples():
    classes = [[(3, 2), (2, 0), (1, 1)], [(5, 5)], [(2, 0)], []]
    n = [8, 5, 6, 3]
    np.testing.assert_allclose(maj_at_k(classes, n, 1), [3 / 8, 1.0, 0.0, 0.0], atol=1e-15)


def test_majority_credits_sum_to_the_probability_that_anyone_answers():
    # the expected tie-break credits of all classes sum to P(some sample of the k votes) = 1 - C(n0, k) / C(n, k)
    from trl_rlvr_ext.evaluation.estimators import _majority_win_probabilities

    sizes, n = (1, 1, 2, 3, 3, 5), 20
    for k in (1, 2, 5, 9, 20):
        wins = _majority_win_probabilities(sizes, n, k)
        total = sum(wins[s] for s in sizes)
        assert total == pytest.approx(1 - math.comb(n - sum(sizes), k) / math.comb(n, k), abs=1e-12)


def test_maj_at_k_at_scale_is_finite_and_bounded_by_pass_at_k():
    # n = 512 with many answers: C(512, 256) overflows a float, the log-space dynamic program does not
    classes = [[(200, 200), (150, 0), (100, 0), (50, 0), (12, 0)], [(256, 0), (255, 255)]]
    for k in (1, 64, 256, 512):
        got = maj_at_k(classes, [512, 512], k)
        assert np.all(np.isfinite(got)) and np.all((0 <= got) & (got <= pass_at_k([512, 512], [200, 255], k) + 1e-12))
    assert maj_at_k(classes, 512, 512)[0] == pytest.approx(1.0) and maj_at_k(classes, 512, 512)[1] == 0.0


def test_answer_classes_and_maj_at_k_input_checks():
    assert answer_classes(["7", None, "9", "7", "7"], [True, True, False, True, False]) == [(3, 2), (1, 0)]
    with pytest.raises(ValueError, match="one per sample"):
        answer_classes(["7"], [True, False])
    with pytest.raises(ValueError, match="size >= 1"):
        maj_at_k([[(2, 3)]], 4, 1)
    with pytest.raises(ValueError, match="num_correct must lie"):  # more votes than samples
        maj_at_k([[(3, 3), (2, 0)]], 4, 1)
    with pytest.raises(ValueError, match=r"maj@5 is undefined"):
        maj_at_k([[(1, 1)]], 4, 5)


# --- bootstrap intervals ------------------------------------------------------------------------------------------


def test_bootstrap_is_seeded_contains_the_estimate_and_shrinks_with_more_problems():
    rng = np.random.default_rng(1)
    values = rng.random(40)
    a = bootstrap_intervals(values, 0.95, 500, seed=3)
    assert a == bootstrap_intervals(values, 0.95, 500, seed=3)
    assert a != bootstrap_intervals(values, 0.95, 500, seed=4)
    low, high = a
    assert low < values.mean() < high
    # the same per-problem values, 16 times as many problems: about a quarter of the width (1 / sqrt(16))
    low16, high16 = bootstrap_intervals(np.tile(values, 16), 0.95, 500, seed=3)
    assert low16 < values.mean() < high16
    assert 0.15 < (high16 - low16) / (high - low) < 0.35
    # a higher level gives a wider interval from the same resamples
    low99, high99 = bootstrap_intervals(values, 0.99, 500, seed=3)
    assert low99 <= low and high <= high99


def test_bootstrap_degenerate_cases_have_zero_width():
    assert bootstrap_intervals(np.ones(10)) == (1.0, 1.0)  # every problem solved
    assert bootstrap_intervals(np.zeros(10)) == (0.0, 0.0)
    assert bootstrap_intervals([0.25]) == (0.25, 0.25)  # one problem: resampling cannot move the mean
    # two problems, 0 and 1: the resampled means are 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4
    low, high = bootstrap_intervals([0.0, 1.0], 0.5, 4000, seed=0)
    assert (low, high) == (0.5, 0.5)
    low, high = bootstrap_intervals([0.0, 1.0], 0.9, 4000, seed=0)
    assert (low, high) == (0.0, 1.0)


def test_bootstrap_columns_share_resamples_and_inputs_are_checked():
    values = np.random.default_rng(2).random((30, 3))
    low, high = bootstrap_intervals(values, 0.9, 300, seed=0)
    for j in range(3):  # the same resamples column by column (to the rounding of a mean over a different axis)
        assert (low[j], high[j]) == pytest.approx(bootstrap_intervals(values[:, j], 0.9, 300, seed=0), rel=1e-12)
    with pytest.raises(ValueError, match="confidence_level"):
        bootstrap_intervals(values, 1.0)
    with pytest.raises(ValueError, match="num_resamples"):
        bootstrap_intervals(values, 0.9, 0)
    with pytest.raises(ValueError, match="at least one problem"):
        bootstrap_intervals([])


def test_pass_metrics_gathers_every_metric_and_interval():
    n, c = np.array([4, 4, 4]), np.array([0, 2, 4])
    classes = [[(3, 0)], [(2, 2), (2, 0)], [(4, 4)]]
    values, intervals = pass_metrics(n, c, [1, 2, 4], classes, confidence_level=0.9, num_resamples=200, seed=0)
    assert list(values) == ["pass@1", "pass@2", "pass@4", "pass^1", "pass^2", "pass^4", "maj@1", "maj@2", "maj@4"]
    assert values["pass@2"] == pytest.approx(pass_at_k(n, c, 2).mean())
    assert values["pass^2"] == pytest.approx((0 + 1 / 6 + 1) / 3)
    assert values["maj@4"] == pytest.approx((0 + 0.5 + 1) / 3)  # the 2-2 split is a tie at k = n
    assert set(intervals) == set(values)
    for name, (low, high) in intervals.items():
        assert low <= values[name] <= high
    values_only, none = pass_metrics(n, c, [1], None, confidence_level=None)
    assert list(values_only) == ["pass@1", "pass^1"] and none == {}


def test_the_numpy_core_imports_without_torch():
    import subprocess
    import sys

    code = "import sys, trl_rlvr_ext.evaluation.estimators; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
