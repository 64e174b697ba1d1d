"""The unbiased pass@k estimator (Chen et al. 2021, https://huggingface.co/papers/2107.03374), vectorised over problems.

For a problem with ``n`` samples of which ``c`` are correct, the probability that at least one of ``k`` samples drawn
without replacement from the ``n`` is correct is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

The product form never forms a binomial coefficient, so it stays exact (to float rounding) for ``n`` in the thousands,
where ``C(n, k)`` overflows a float. It is 1 when ``n - c < k`` (every ``k``-subset contains a correct sample) and
undefined when ``k > n`` (there is no ``k``-subset): that is an error here, not 1.
"""

from collections.abc import Iterable, Sequence

import numpy as np


# Elements of the (problems x correct samples) product matrix built at once; bounds memory for huge evaluations.
_CHUNK_ELEMENTS = 1 << 22


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
            f"pass@{k} is undefined for problems with fewer than {k} samples (problems {bad.tolist()} have "
            f"n={n.ravel()[bad].tolist()}): there is no {k}-subset to draw. Sample at least {k} completions per "
            f"problem or ask for a smaller k."
        )

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
