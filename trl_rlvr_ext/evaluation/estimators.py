"""Unbiased estimators of pass@k, pass^k and maj@k over problems, and bootstrap confidence intervals (numpy only).

pass@k is the estimator of Chen et al. 2021 (https://huggingface.co/papers/2107.03374), vectorised over problems.

For a problem with ``n`` samples of which ``c`` are correct, the probability that at least one of ``k`` samples drawn
without replacement from the ``n`` is correct is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

The product form never forms a binomial coefficient, so it stays exact (to float rounding) for ``n`` in the thousands,
where ``C(n, k)`` overflows a float. It is 1 when ``n - c < k`` (every ``k``-subset contains a correct sample) and
undefined when ``k > n`` (there is no ``k``-subset): that is an error here, not 1.

pass^k (all ``k`` correct) is ``C(c, k) / C(n, k)``; maj@k (the majority answer of ``k`` samples is correct) is an
exact expectation over the ``k``-subsets too. All three are unbiased for the per-problem probability under sampling
without replacement from the ``n`` samples, and `bootstrap_intervals` resamples problems for their uncertainty.
"""

import math
from collections.abc import Hashable, Iterable, Sequence
from functools import lru_cache

import numpy as np


# Elements of the (problems x correct samples) product matrix built at once; bounds memory for huge evaluations.
_CHUNK_ELEMENTS = 1 << 22


def _checked_counts(num_samples, num_correct, k, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(n, c)`` broadcast to one shape as int64, after checking that they are counts and that ``1 <= k <= n``."""
    n = np.asarray(num_samples)
    c = np.asarray(num_correct)
    for name, value in (("num_samples", n), ("num_correct", c)):
        if value.size and not np.issubdtype(value.dtype, np.integer) and not np.all(np.mod(value, 1) == 0):
            raise ValueError(f"{name} must hold integers (sample counts), got {value!r}.")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    n, c = np.broadcast_arrays(n.astype(np.int64), c.astype(np.int64))
    if np.any(n < 1):
        raise ValueError(f"num_samples must be at least 1 for every problem, got a minimum of {n.min()}.")
    if np.any(c < 0) or np.any(c > n):
        bad = np.flatnonzero((c < 0) | (c > n))[:5]
        raise ValueError(
            f"num_correct must lie in [0, num_samples] for every problem; problems {bad.tolist()} violate it "
            f"(n={n.ravel()[bad].tolist()}, c={c.ravel()[bad].tolist()})."
        )
    if np.any(k > n):
        bad = np.flatnonzero(n.ravel() < k)[:5]
        raise ValueError(
            f"{metric}{k} is undefined for problems with fewer than {k} samples (problems {bad.tolist()} have "
            f"n={n.ravel()[bad].tolist()}): there is no {k}-subset to draw. Sample at least {k} completions per "
            f"problem or ask for a smaller k."
        )
    return n, c


def pass_at_k(num_samples, num_correct, k: int) -> np.ndarray:
    r"""
    Unbiased pass@k of each problem.

    Args:
        num_samples (`int` or array-like of `int`):
            ``n``: samples drawn per problem (a scalar applies to every problem).
        num_correct (`int` or array-like of `int`):
            ``c``: correct samples per problem, ``0 <= c <= n``.
        k (`int`):
            The ``k`` of pass@k, ``1 <= k <= n`` for every problem.

    Returns:
        `np.ndarray` of `float64`, one value per problem (the broadcast shape of the inputs). Average it over problems
        for the benchmark's pass@k.

    Example:
    ```python
    >>> from trl_rlvr_ext.evaluation import pass_at_k
    >>> pass_at_k([4, 4, 4], [0, 1, 4], k=2)  # 1 - C(3, 2) / C(4, 2) = 0.5 for the second problem
    array([0. , 0.5, 1. ])
    ```
    """
    n, c = _checked_counts(num_samples, num_correct, k, "pass@")
    flat_n, flat_c = n.ravel(), c.ravel()
    out = np.ones(flat_n.shape, dtype=np.float64)  # n - c < k: every k-subset holds a correct sample
    todo = np.flatnonzero(flat_n - flat_c >= k)
    # Rows: problems; columns j = 0..c-1 stand for i = n - c + 1 + j; columns j >= c are padding (factor 1).
    max_c = int(flat_c[todo].max()) if todo.size else 0
    chunk = max(1, _CHUNK_ELEMENTS // max(max_c, 1))
    for start in range(0, todo.size, chunk):
        rows = todo[start : start + chunk]
        rn, rc = flat_n[rows, None], flat_c[rows, None]
        j = np.arange(max_c)[None, :]
        i = (rn - rc + 1 + j).astype(np.float64)
        factors = np.where(j < rc, 1.0 - k / i, 1.0)  # here i > n - c >= k, so every factor is in (0, 1)
        out[rows] = 1.0 - np.prod(factors, axis=1)
    return out.reshape(n.shape)


def default_ks(num_samples: int) -> list[int]:
    """The k's to report for ``n`` samples per problem: 1, 2, 4, ... up to ``n``, and ``n`` itself."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}.")
    ks, k = [], 1
    while k < num_samples:
        ks.append(k)
        k *= 2
    ks.append(num_samples)
    return ks


def pass_at_k_curve(num_samples, num_correct, ks: Iterable[int] | None = None) -> dict[int, float]:
    """Mean pass@k over problems for each ``k`` in ``ks`` (default: `default_ks` of the smallest ``n``)."""
    n = np.asarray(num_samples)
    if n.size == 0:
        raise ValueError("There are no problems to compute pass@k on.")
    ks = default_ks(int(n.min())) if ks is None else list(ks)
    return {int(k): float(pass_at_k(num_samples, num_correct, int(k)).mean()) for k in ks}


# The evaluator's historical name for the same curve; one definition serves both.
curve_from_counts = pass_at_k_curve


def counts_from_correctness(correct: Sequence[Sequence[bool]]) -> tuple[np.ndarray, np.ndarray]:
    """``(n, c)`` per problem from per-sample correctness lists (one list per problem, lengths may differ)."""
    n = np.array([len(row) for row in correct], dtype=np.int64)
    c = np.array([int(sum(bool(x) for x in row)) for row in correct], dtype=np.int64)
    return n, c


def pass_hat_k(num_samples, num_correct, k: int) -> np.ndarray:
    r"""
    Unbiased pass^k of each problem: the probability that all of ``k`` samples drawn without replacement from the
    ``n`` are correct,

        pass^k = C(c, k) / C(n, k) = prod_{i = 0}^{k - 1} (c - i) / (n - i)

    (0 when ``c < k``). The product form never forms a binomial coefficient, so it is stable for ``n`` in the thousands.
    It is the reliability counterpart of pass@k (tau-bench, https://huggingface.co/papers/2406.12045): pass^1 equals
    pass@1, and pass^k falls with ``k`` unless every sample is correct.

    Args:
        num_samples (`int` or array-like of `int`):
            ``n``: samples drawn per problem (a scalar applies to every problem).
        num_correct (`int` or array-like of `int`):
            ``c``: correct samples per problem, ``0 <= c <= n``.
        k (`int`):
            The ``k`` of pass^k, ``1 <= k <= n`` for every problem.

    Returns:
        `np.ndarray` of `float64`, one value per problem.

    Example:
    ```python
    >>> from trl_rlvr_ext.evaluation import pass_hat_k
    >>> pass_hat_k([4, 4, 4], [1, 3, 4], k=2)  # C(3, 2) / C(4, 2) = 0.5 for the second problem
    array([0. , 0.5, 1. ])
    ```
    """
    n, c = _checked_counts(num_samples, num_correct, k, "pass^")
    flat_n, flat_c = n.ravel(), c.ravel()
    out = np.zeros(flat_n.shape, dtype=np.float64)  # c < k: no k-subset is all correct
    todo = np.flatnonzero(flat_c >= k)
    chunk = max(1, _CHUNK_ELEMENTS // k)
    j = np.arange(k)[None, :]
    for start in range(0, todo.size, chunk):
        rows = todo[start : start + chunk]
        factors = (flat_c[rows, None] - j) / (flat_n[rows, None] - j)  # each in (0, 1]: c - j <= n - j, c - j >= 1
        out[rows] = np.prod(factors, axis=1)
    return out.reshape(n.shape)


def answer_classes(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> list[tuple[int, int]]:
    """The sufficient statistic of one problem for maj@k: ``(size, correct)`` of each distinct extracted answer.

    Args:
        answers: the extracted answer of each sample (``None`` when no answer could be extracted: it casts no vote).
        correct: the correctness of each sample.

    Returns:
        ``[(n_a, c_a), ...]``, one pair per distinct answer in order of first appearance: ``n_a`` samples gave answer
        ``a`` and ``c_a`` of them are correct. Samples without an answer are not listed (they number ``n - sum n_a``).
    """
    if len(answers) != len(correct):
        raise ValueError(f"Got {len(answers)} answers for {len(correct)} correctness flags; pass one per sample.")
    classes: dict = {}
    for answer, ok in zip(answers, correct):
        if answer is None:
            continue
        size, num_correct = classes.get(answer, (0, 0))
        classes[answer] = (size + 1, num_correct + int(bool(ok)))
    return list(classes.values())


@lru_cache(maxsize=4096)
def _majority_win_probabilities(sizes: tuple[int, ...], num_samples: int, k: int) -> dict[int, float]:
    """For each distinct answer-class size ``s`` in ``sizes``: the expected tie-break credit of one class of that size
    over the ``k``-subsets, ``E[1{the class is among the most voted} / #most voted]``.

    A class with ``t`` of the ``k`` votes is among the most voted when every other class has at most ``t``. A dynamic
    program over the other classes gives, for each ``r``, the probability that a uniform ``(k - t)``-subset of the
    other samples leaves every other class at most ``t`` with exactly ``r`` of them at ``t``. It carries probabilities
    (counts over ``C(N, j)``, through hypergeometric weights), never counts, so ``C(n, k)`` never overflows. ``sizes``
    is sorted, so problems with the same vote profile share the work.
    """
    log_fact = np.array([math.lgamma(i + 1) for i in range(num_samples + 1)])

    def log_comb(a, b):
        b = np.asarray(b)
        inside = (b >= 0) & (b <= a)
        safe = np.clip(b, 0, a)
        return np.where(inside, log_fact[a] - log_fact[safe] - log_fact[a - safe], -np.inf)

    num_abstain = num_samples - sum(sizes)
    j_all = np.arange(k)
    out = {}
    for size in sorted(set(sizes)):
        others = list(sizes)
        others.remove(size)
        # weights[o][v, j']: hypergeometric probability that v of j' samples drawn from the seen samples (N, then this
        # class of b) come from the class, C(b, v) C(N, j' - v) / C(N + b, j'); the same for every t, so built once
        weights, seen = [], num_abstain
        for other in others:
            votes = np.arange(min(other, k) + 1)[:, None]
            # j' > N + b has no subset: an infinite normaliser makes its weights 0 (and avoids -inf - -inf)
            log_norm = np.where(j_all <= seen + other, log_comb(seen + other, j_all), np.inf)[None, :]
            weights.append(np.exp(log_comb(other, votes) + log_comb(seen, j_all[None, :] - votes) - log_norm))
            seen += other
        credit = 0.0
        for t in range(1, min(size, k) + 1):
            rest = k - t  # samples drawn outside the class
            if rest > num_samples - size:
                continue  # not enough other samples: the class cannot hold exactly t of the k votes
            max_ties = rest // t  # at most this many other classes can also hold t votes
            # state[j, r]: over the uniform j-subsets of the samples seen so far (the unanswered ones, then one class
            # at a time), the probability that every class seen has fewer than t votes except exactly r at t
            state = np.zeros((rest + 1, max_ties + 1))
            state[: min(num_abstain, rest) + 1, 0] = 1.0
            for other, weight in zip(others, weights):
                new = np.zeros_like(state)
                for votes in range(min(other, t, rest) + 1):
                    w = weight[votes, votes : rest + 1, None]
                    if votes < t:
                        new[votes:] += w * state[: rest + 1 - votes]
                    elif max_ties >= 1:
                        new[votes:, 1:] += w * state[: rest + 1 - votes, :-1]
                state = new
            tie_break = 1.0 / np.arange(1, max_ties + 2)  # uniform among the 1 + r most voted
            # P(the class holds exactly t votes) = C(s, t) C(n - s, k - t) / C(n, k)
            holds = math.exp(float(log_comb(size, t) + log_comb(num_samples - size, rest) - log_comb(num_samples, k)))
            credit += holds * float(state[rest] @ tie_break)
        out[size] = credit
    return out


def maj_at_k(answer_classes_per_problem: Sequence[Sequence[tuple[int, int]]], num_samples, k: int) -> np.ndarray:
    r"""
    Unbiased maj@k of each problem: the probability that the majority answer of ``k`` samples drawn without
    replacement from the ``n`` is correct, computed exactly over all ``k``-subsets.

    The vote: each sample votes for its extracted answer; samples without an answer abstain (if all ``k`` abstain the
    problem counts as failed). Ties: the majority answer is drawn uniformly among the most voted answers, and the
    returned sample uniformly among the samples in the subset that gave it, so the value is the expectation over
    both draws: a ``k``-subset where answers ``a`` and ``b`` tie contributes ``(q_a + q_b) / 2``, with ``q_a`` the share of
    correct samples among those of answer ``a``. When correctness is a function of the answer (the usual case:
    every sample of an answer is right or every one is wrong), ``q_a`` is 1 or 0 and a tie counts as the fraction of
    tied answers that are correct.

    With ``(n_a, c_a)`` per answer class (see `answer_classes`), maj@k ``= sum_a (c_a / n_a) w_a`` where ``w_a`` is
    the expected tie-break credit of class ``a`` over the ``k``-subsets (a dynamic program over vote counts, exact to
    float rounding; it depends only on the class sizes, so it is cached per vote profile). maj@1 is the share of
    samples that are answered and correct.

    Args:
        answer_classes_per_problem: for each problem, ``[(n_a, c_a), ...]`` over its distinct answers.
        num_samples (`int` or array-like of `int`): ``n`` per problem (``n - sum n_a`` samples gave no answer).
        k (`int`): the ``k`` of maj@k, ``1 <= k <= n``.

    Returns:
        `np.ndarray` of `float64`, one value per problem.

    Example:
    ```python
    >>> from trl_rlvr_ext.evaluation import maj_at_k
    >>> # 4 samples: "7" twice (right), "9" once (wrong), one unanswered; k = 2 draws 6 pairs, of which
    >>> # {7, 7}, {7, 9} x 2 (tie: 1/2 each), {7, -} x 2 are credited: (1 + 1/2 + 1/2 + 1 + 1) / 6 = 2/3
    >>> maj_at_k([[(2, 2), (1, 0)]], 4, k=2)
    array([0.66666667])
    ```
    """
    classes = [list(problem) for problem in answer_classes_per_problem]
    n = np.broadcast_to(np.asarray(num_samples), (len(classes),))
    out = np.zeros(len(classes), dtype=np.float64)
    for p, problem in enumerate(classes):
        sizes = np.array([size for size, _ in problem], dtype=np.int64)
        correct = np.array([c for _, c in problem], dtype=np.int64)
        total = int(sizes.sum())
        _checked_counts(n[p], total, k, "maj@")
        if np.any(sizes < 1) or np.any(correct < 0) or np.any(correct > sizes):
            raise ValueError(
                f"Problem {p}: every answer class needs size >= 1 and 0 <= correct <= size, got {problem}."
            )
        if not problem:
            continue  # nothing was answered: the majority never exists
        wins = _majority_win_probabilities(tuple(sorted(sizes.tolist())), int(n[p]), int(k))
        out[p] = float(sum(c / s * wins[int(s)] for s, c in zip(sizes, correct)))
    return out


def bootstrap_intervals(
    values, confidence_level: float = 0.95, num_resamples: int = 1000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    r"""
    Percentile bootstrap confidence intervals for means over problems, resampling problems with replacement.

    The uncertainty of a benchmark score is mostly which problems the benchmark happens to hold; resampling problems
    covers it for any per-problem estimate (pass@k at every k, pass^k, maj@k) with one method. The columns of
    ``values`` share the resampled problem sets, so the intervals of one call are paired.

    Args:
        values (array-like of shape ``(problems,)`` or ``(problems, metrics)``): per-problem values.
        confidence_level: the coverage of each interval, in ``(0, 1)``.
        num_resamples: bootstrap resamples.
        seed: seed of the resampling (`numpy.random.default_rng`): the same inputs and seed give the same intervals.

    Returns:
        ``(low, high)``, each of shape ``(metrics,)`` (a 0-d array for 1-d ``values``). A set of one problem, or one where
        every problem has the same value, has zero width.
    """
    if not 0.0 < confidence_level < 1.0:
        raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level}.")
    if isinstance(num_resamples, bool) or not isinstance(num_resamples, (int, np.integer)) or num_resamples < 1:
        raise ValueError(f"num_resamples must be a positive integer, got {num_resamples!r}.")
    values = np.asarray(values, dtype=np.float64)
    squeeze = values.ndim == 1
    if squeeze:
        values = values[:, None]
    if values.ndim != 2 or values.shape[0] == 0:
        raise ValueError(
            f"values must be (problems,) or (problems, metrics) with at least one problem, got {values.shape}."
        )
    num_problems = values.shape[0]
    rng = np.random.default_rng(seed)
    means = np.empty((num_resamples, values.shape[1]), dtype=np.float64)
    chunk = max(1, _CHUNK_ELEMENTS // num_problems)
    for start in range(0, num_resamples, chunk):
        size = min(chunk, num_resamples - start)
        idx = rng.integers(0, num_problems, size=(size, num_problems))
        means[start : start + size] = values[idx].mean(axis=1)
    alpha = (1.0 - confidence_level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    if squeeze:
        return low[0], high[0]
    return low, high


def pass_metrics(
    num_samples,
    num_correct,
    ks: Iterable[int] | None = None,
    answer_classes_per_problem: Sequence[Sequence[tuple[int, int]]] | None = None,
    confidence_level: float | None = 0.95,
    num_resamples: int = 1000,
    seed: int = 0,
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """pass@k, pass^k and (with answer classes) maj@k averaged over problems for each ``k``, and their intervals.

    Args:
        num_samples, num_correct: ``n`` and ``c`` per problem.
        ks: the k's (default `default_ks` of the smallest ``n``).
        answer_classes_per_problem: ``[(n_a, c_a), ...]`` per problem (see `answer_classes`); `None` skips maj@k.
        confidence_level: the level of the `bootstrap_intervals`; `None` skips them.
        num_resamples, seed: the bootstrap's settings.

    Returns:
        ``(values, intervals)``: ``values`` maps ``"pass@<k>"``, ``"pass^<k>"`` and ``"maj@<k>"`` to means over problems;
        ``intervals`` maps the same names to ``(low, high)`` (empty when ``confidence_level`` is `None`).
    """
    n = np.asarray(num_samples)
    if n.size == 0:
        raise ValueError("There are no problems to compute pass@k on.")
    ks = default_ks(int(n.min())) if ks is None else [int(k) for k in ks]
    columns: dict[str, np.ndarray] = {}
    for k in ks:
        columns[f"pass@{k}"] = pass_at_k(num_samples, num_correct, k)
    for k in ks:
        columns[f"pass^{k}"] = pass_hat_k(num_samples, num_correct, k)
    if answer_classes_per_problem is not None:
        if len(answer_classes_per_problem) != n.size:
            raise ValueError(
                f"Got answer classes for {len(answer_classes_per_problem)} problems, counts for {n.size}."
            )
        for k in ks:
            columns[f"maj@{k}"] = maj_at_k(answer_classes_per_problem, num_samples, k)
    values = {name: float(column.mean()) for name, column in columns.items()}
    intervals: dict[str, tuple[float, float]] = {}
    if confidence_level is not None:
        low, high = bootstrap_intervals(
            np.stack(list(columns.values()), axis=1), confidence_level, num_resamples, seed
        )
        intervals = {name: (float(lo), float(hi)) for name, lo, hi in zip(columns, low, high)}
    return values, intervals
