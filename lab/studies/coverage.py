"""How often the rule's interval holds a known effect, measured in simulation on named designs, and the statement the
index renders from those measurements (``index:coverage``).

A coverage figure holds for the design it was measured on, not in general. Each `CoverageDesign` names its tables
(seeds × problems, how each value arises) and records what `tests/test_verdicts.py` measures on it, with a fixed seed,
so the page's numbers are the test's and cannot drift from it:

- three **Gaussian** crossed designs (d[s, p] = μ + seed + problem + residual terms, normal), measured by
  ``test_the_interval_covers_a_known_effect_about_95_percent_of_the_time``;
- two **binomial** designs (`simulate_binomial`), the kind of table the studies judge: per problem a logit θ_p ~
  N(mu, problem_sd); per seed and arm a training shift u ~ N(0, seed_sd) (a run's own luck, shared by its problems);
  the arm's logit is the baseline's plus ``effect_logit``; each (seed, arm, problem) draws ``samples`` completions,
  correct with probability σ(logit), and the value is the problem's unbiased pass@k. The known effect is the population
  mean of pass@k, arm minus baseline (exact, by Gauss-Hermite quadrature over θ + u ~ N(mu, √(problem_sd² +
  seed_sd²))).

A table whose arms are identical on every cell is **no test** (`verdicts.IDENTICAL`: no interval is formed); its share
is recorded, and the coverage is given both over the tables the rule judged and counting each no-test table as a miss.
"""

import dataclasses
import math

import numpy as np

from trl_rlvr_ext.evaluation.estimators import pass_at_k


@dataclasses.dataclass(frozen=True)
class CoverageDesign:
    """A simulated design and what the test measured on it: ``coverage`` (the share of judged tables whose interval
    holds the known effect), ``upper_miss`` / ``lower_miss`` (the interval's high end below the effect / its low end
    above it; 2.5 % each is nominal), ``no_test`` (the share of tables with identical arms), over ``tables`` tables."""

    name: str
    label: str
    tables: int
    coverage: float
    upper_miss: float
    lower_miss: float
    no_test: float = 0.0
    # a binomial design's parameters (`simulate_binomial`); None for a Gaussian one (its test holds its parameters)
    binomial: dict | None = None


def pass_at_k_values(samples: int, k: int) -> np.ndarray:
    """The unbiased pass@k of a problem with c of ``samples`` correct, for c = 0..samples: 1 − C(n−c, k)/C(n, k), by
    the package's estimator (the one every study's pass@k comes from)."""
    return pass_at_k(samples, np.arange(samples + 1), k)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def true_effect(mu: float, problem_sd: float, seed_sd: float, effect_logit: float, k: int) -> float:
    """The population mean of pass@k, arm minus baseline, of the binomial model (see the module): Gauss-Hermite
    quadrature (80 nodes) over the logit's normal law."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    logits = mu + math.sqrt(problem_sd**2 + seed_sd**2) * nodes
    value = weights @ ((1 - (1 - _sigmoid(logits + effect_logit)) ** k) - (1 - (1 - _sigmoid(logits)) ** k))
    return float(value / weights.sum())


def binomial_table(rng, seeds, problems, samples, k, mu, problem_sd, seed_sd, effect_logit):
    """One simulated (arm, baseline) pair of ``{seed: per-problem pass@k}`` of the binomial model (see the module)."""
    theta = rng.normal(mu, problem_sd, problems)
    values = pass_at_k_values(samples, k)
    arm, base = {}, {}
    for seed in range(seeds):
        shift_arm, shift_base = rng.normal(0, seed_sd, 2)
        arm[seed] = values[rng.binomial(samples, _sigmoid(theta + effect_logit + shift_arm))]
        base[seed] = values[rng.binomial(samples, _sigmoid(theta + shift_base))]
    return arm, base


def simulate_binomial(design: CoverageDesign, resamples: int = 300, seed: int = 0) -> CoverageDesign:
    """``design`` with its coverage, misses and no-test share measured again: ``design.tables`` binomial tables
    (`binomial_table`, one generator seeded ``seed``), each judged by `verdicts.judge` (``resamples`` bootstrap
    resamples, seeded by the table's index; no headroom rule: the interval itself is measured)."""
    from .verdicts import Claim, judge

    p = design.binomial
    truth = true_effect(p["mu"], p["problem_sd"], p["seed_sd"], p["effect_logit"], p["k"])
    claim = Claim("coverage", "arm", "baseline", f"pass@{p['k']}", smallest_effect=max(truth, 1e-3))
    rng = np.random.default_rng(seed)
    covered = upper = lower = identical = 0
    for index in range(design.tables):
        arm, base = binomial_table(rng, **p)
        if all(np.array_equal(arm[s], base[s]) for s in arm):
            identical += 1
            continue
        j = judge(claim, arm, base, num_resamples=resamples, seed=index, headroom=False)
        covered += j.low <= truth <= j.high
        upper += j.high < truth
        lower += j.low > truth
    judged = design.tables - identical
    return dataclasses.replace(
        design,
        coverage=round(covered / judged, 4),
        upper_miss=round(upper / judged, 4),
        lower_miss=round(lower / judged, 4),
        no_test=round(identical / design.tables, 4),
    )


# What tests/test_verdicts.py measures (it asserts each number again, from the same seeds).
COVERAGE_DESIGNS = (
    CoverageDesign(
        "gaussian_problem",
        "Gaussian, 5 seeds × 40 problems, the shared problem term dominating",
        300,
        coverage=0.9533,
        upper_miss=0.0267,
        lower_miss=0.02,
    ),
    CoverageDesign(
        "gaussian_three_seeds",
        "Gaussian, 3 seeds × 60 problems, seed, problem and residual terms alike",
        300,
        coverage=0.9567,
        upper_miss=0.0167,
        lower_miss=0.0267,
    ),
    CoverageDesign(
        "gaussian_residual",
        "Gaussian, 5 seeds × 30 problems, the residual term dominating",
        300,
        coverage=0.9833,
        upper_miss=0.0133,
        lower_miss=0.0033,
    ),
    CoverageDesign(
        "binomial_ceiling",
        "binomial pass@16 near the ceiling, 5 seeds × 32 problems × 16 samples (the baseline's pass@16 about 0.96; "
        "arm +1 logit)",
        400,
        coverage=0.9947,
        upper_miss=0.0053,
        lower_miss=0.0,
        no_test=0.06,
        binomial={
            "seeds": 5,
            "problems": 32,
            "samples": 16,
            "k": 16,
            "mu": 1.5,
            "problem_sd": 2.5,
            "seed_sd": 0.0,
            "effect_logit": 1.0,
        },
    ),
    CoverageDesign(
        "binomial_seeds",
        "binomial pass@1, 3 seeds × 16 problems × 16 samples, the seed (a run's own shift) dominating the problems",
        400,
        coverage=0.945,
        upper_miss=0.0325,
        lower_miss=0.0225,
        binomial={
            "seeds": 3,
            "problems": 16,
            "samples": 16,
            "k": 1,
            "mu": 0.0,
            "problem_sd": 0.3,
            "seed_sd": 1.0,
            "effect_logit": 0.3,
        },
    ),
    CoverageDesign(
        "binomial_floor",
        "binomial pass@1 near the floor, 3 seeds × 32 problems × 16 samples (the baseline's pass@1 about 0.02; arm +1 "
        "logit)",
        400,
        coverage=0.96,
        upper_miss=0.04,
        lower_miss=0.0,
        binomial={
            "seeds": 3,
            "problems": 32,
            "samples": 16,
            "k": 1,
            "mu": -5.0,
            "problem_sd": 1.5,
            "seed_sd": 0.0,
            "effect_logit": 1.0,
        },
    ),
)


def _percent(value: float) -> str:
    return f"{100 * value:.1f} %"


def coverage_statement(designs=COVERAGE_DESIGNS) -> str:
    """The index's statement of the interval's coverage: one line per measured design, its coverage over the tables
    the rule judged, the share of its upper and lower misses (2.5 % each is nominal), and where identical arms made
    tables no test, the coverage counting those as misses."""
    lines = []
    for d in designs:
        line = (
            f"- {d.label} ({d.tables} tables): **{_percent(d.coverage)}**; the interval's high end below the effect in "
            f"{_percent(d.upper_miss)}, its low end above it in {_percent(d.lower_miss)}"
        )
        if d.no_test:
            counted = d.coverage * (1 - d.no_test)
            line += (
                f"; {_percent(d.no_test)} of the tables had identical arms (no test), and counting those as misses "
                f"the coverage is {_percent(counted)}"
            )
        lines.append(line)
    return "\n".join(lines)
