"""The interval arithmetic behind `lab.studies.verdicts`: paired differences, the crossed (seed x problem) bootstrap
and t intervals, the minimum detectable effect, power at an effect, and the share of cells at a bound (headroom).
Pure numpy; the rule that turns these into verdicts is `lab.studies.verdicts`.
"""

import math
from collections.abc import Mapping, Sequence

import numpy as np

from trl_rlvr_ext.evaluation.paired import chunked_resample_means

from .student_t import student_t_cdf, student_t_quantile


def paired_differences(arm: Mapping[int, Sequence[float]], baseline: Mapping[int, Sequence[float]]) -> np.ndarray:
    """``d[s, p]``: per seed (the seeds both have) and per problem, arm minus baseline. Every seed must hold the same
    problems, in the same order, in both."""
    seeds = sorted(set(arm) & set(baseline))
    if len(seeds) < 2:
        raise ValueError(
            f"A paired comparison needs at least 2 seeds that both arms ran, got {seeds} (arm {sorted(arm)}, "
            f"baseline {sorted(baseline)})."
        )
    rows = []
    for seed in seeds:
        a, b = np.asarray(arm[seed], dtype=float), np.asarray(baseline[seed], dtype=float)
        if a.shape != b.shape or a.ndim != 1 or a.size == 0:
            raise ValueError(f"Seed {seed}: the arm has {a.shape} values and the baseline {b.shape}; they must pair.")
        rows.append(a - b)
    if len({row.size for row in rows}) != 1:
        raise ValueError("Every seed must be evaluated on the same problems.")
    return np.stack(rows)


def _nested(rng, size, num_seeds, num_problems, differences):
    seed_draws = rng.integers(0, num_seeds, size=(size, num_seeds))
    problem_draws = rng.integers(0, num_problems, size=(size, num_seeds, num_problems))
    return differences[seed_draws[..., None], problem_draws]


def hierarchical_bootstrap(differences: np.ndarray, num_resamples: int = 10_000, seed: int = 0) -> np.ndarray:
    """Means of ``num_resamples`` nested resamples of ``differences`` (seeds × problems): seeds with replacement, then
    problems with replacement *within each drawn seed*. Not the rule's (see the module: it shrinks the shared problem
    variance by the seed count); kept to show, in the tests, what the crossed design corrects."""
    return chunked_resample_means(differences, num_resamples, seed, _nested)


def crossed_standard_error(differences: np.ndarray) -> tuple[float, float]:
    """``(se, ν)``: the standard error of the grand mean of a seeds × problems table under the crossed model (see the
    module) and its Satterthwaite degrees of freedom.

    Two-way ANOVA without replication: MS_seed = P Σ_s (r_s − m)² / (S − 1), MS_problem = S Σ_p (c_p − m)² / (P − 1),
    MS_residual = Σ (d − r_s − c_p + m)² / ((S − 1)(P − 1)), with r, c the seed and problem means and m the grand mean;
    E[MS_seed + MS_problem − MS_residual] = S P · Var(m). The estimate is floored at max(MS_seed, MS_problem), whose
    expectations (σ²_e + P σ²_seed, σ²_e + S σ²_problem) are each at most S P · Var(m). With one problem only the seed
    term is left: the t interval over seeds."""
    d = np.asarray(differences, dtype=float)
    num_seeds, num_problems = d.shape
    if num_seeds < 2:
        raise ValueError(f"A crossed interval needs at least 2 seeds, got {num_seeds}.")
    grand = d.mean()
    seed_means, problem_means = d.mean(axis=1), d.mean(axis=0)
    ms_seed = num_problems * float(np.sum((seed_means - grand) ** 2)) / (num_seeds - 1)
    if num_problems < 2:
        return math.sqrt(ms_seed / num_seeds), float(num_seeds - 1)
    ms_problem = num_seeds * float(np.sum((problem_means - grand) ** 2)) / (num_problems - 1)
    df_residual = (num_seeds - 1) * (num_problems - 1)
    residual = d - seed_means[:, None] - problem_means[None, :] + grand
    ms_residual = float(np.sum(residual**2)) / df_residual
    terms = [(ms_seed, num_seeds - 1), (ms_problem, num_problems - 1), (-ms_residual, df_residual)]
    combined = ms_seed + ms_problem - ms_residual
    if combined >= max(ms_seed, ms_problem):
        denominator = sum(value**2 / df for value, df in terms)
        df = combined**2 / denominator if denominator > 0 else math.inf
    else:  # the floor: the larger mean square alone, with its own degrees of freedom
        combined, df = max((ms_seed, num_seeds - 1), (ms_problem, num_problems - 1))
    return math.sqrt(max(combined, 0.0) / (num_seeds * num_problems)), float(df)


def crossed_t_interval(differences: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(low, high, ν)``: the grand mean ± t_{(1+confidence)/2, ν} · se (`crossed_standard_error`)."""
    se, df = crossed_standard_error(differences)
    mean = float(np.asarray(differences, dtype=float).mean())
    half = student_t_quantile(1 - (1 - confidence) / 2, df) * se if se > 0 else 0.0
    return mean - half, mean + half, df


def seed_t_interval(differences: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The t interval of the per-seed mean differences (seeds as the only unit, ``n − 1`` degrees of freedom): right
    where a seed yields one number (a matched-KL point, `lab.studies.frontier`); per-problem values take
    `crossed_t_interval`."""
    seed_means = np.asarray(differences, dtype=float).mean(axis=1)
    n = seed_means.size
    if n < 2:
        raise ValueError(f"A t interval over seeds needs at least 2 seeds, got {n}.")
    half = student_t_quantile(1 - (1 - confidence) / 2, n - 1) * float(seed_means.std(ddof=1)) / math.sqrt(n)
    return float(seed_means.mean()) - half, float(seed_means.mean()) + half


def minimum_detectable_effect(
    standard_error: float, degrees_of_freedom: float = math.inf, confidence: float = 0.95, power: float = 0.8
) -> float:
    """The smallest true effect this design detects (interval excludes 0) with probability ``power``:
    ``(t_{1−α/2, ν} + t_{power, ν}) · se`` (ν = ∞: the normal quantiles)."""
    return (
        student_t_quantile(1 - (1 - confidence) / 2, degrees_of_freedom)
        + student_t_quantile(power, degrees_of_freedom)
    ) * standard_error


def power_at(effect: float, standard_error: float, degrees_of_freedom: float = math.inf, confidence: float = 0.95):
    """The probability that a two-sided ``confidence`` interval excludes 0 when the true effect is ``effect``:
    ``T_ν(|δ|/se − t_{1−α/2, ν}) + T_ν(−|δ|/se − t_{1−α/2, ν})``, the shifted central t that `minimum_detectable_effect`
    inverts (at ``effect`` = MDE the first term is ``power``); nan without a standard error."""
    if not standard_error > 0 or not math.isfinite(standard_error):
        return float("nan")
    z = abs(effect) / standard_error
    quantile = student_t_quantile(1 - (1 - confidence) / 2, degrees_of_freedom)
    return student_t_cdf(z - quantile, degrees_of_freedom) + student_t_cdf(-z - quantile, degrees_of_freedom)


def non_inferiority_power(
    margin: float, standard_error: float, degrees_of_freedom: float = math.inf, confidence: float = 0.95
) -> float:
    """The probability that a non-inferiority claim is reproduced (the interval's low end above ``−margin``) when the
    arm truly equals its baseline: ``T_ν(m/se − t_{1−α/2, ν})``, the shifted t of `power_at` (one end only: the other
    cannot reproduce it); nan without a standard error."""
    if not standard_error > 0 or not math.isfinite(standard_error):
        return float("nan")
    quantile = student_t_quantile(1 - (1 - confidence) / 2, degrees_of_freedom)
    return student_t_cdf(margin / standard_error - quantile, degrees_of_freedom)


def headroom_share(arm, baseline, direction: int) -> float:
    """The share of the seed × problem cells (the seeds both have) where the baseline sits at the bound the claim moves
    towards: 1 for a claim that the arm is higher (``direction`` +1), 0 for lower. Values are pass rates in [0, 1]."""
    seeds = sorted(set(arm) & set(baseline))
    cells = np.concatenate([np.asarray(baseline[s], dtype=float) for s in seeds])
    return float(np.mean(cells == (1.0 if direction == 1 else 0.0)))
