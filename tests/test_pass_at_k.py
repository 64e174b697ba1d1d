"""The unbiased pass@k estimator: exact against brute force, errors, stability, and the `evaluate` module."""

import itertools
import math

import numpy as np
import pytest

from trl_rlvr_ext.evaluation import (
    PASS_AT_K_METRIC_PATH,
    counts_from_correctness,
    default_ks,
    pass_at_k,
    pass_at_k_curve,
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
