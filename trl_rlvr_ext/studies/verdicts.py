"""The verdict rule of a study: a pre-declared, paired comparison with a 95 % interval, judged mechanically.

A claim names an arm, its baseline, a metric and the claimed direction, and, where the paper gives one, the paper's
effect size (else a smallest effect of interest). The effect is the **paired** difference, arm minus baseline, on the
same seeds and the same problems:

    d[s, p] = metric_arm[s, p] − metric_baseline[s, p]        (seed s, problem p)
    effect  = mean_s mean_p d[s, p]

Its interval is the **hull of two 95 % intervals**:

- a **hierarchical bootstrap**: resample the seeds with replacement, then, within each drawn seed, the problems with
  replacement, and take the mean; the percentile interval of those means. Both sources of variation (training seeds,
  the finite problem set) enter, and the pairing is kept (a problem's arm and baseline values are resampled
  together);
- a **t interval over seeds** (`seed_t_interval`): the per-seed mean differences, Student's t with seeds − 1 degrees
  of freedom.

Why both: with the few seeds a CPU affords (3-5), the percentile bootstrap is too narrow at the seed level (3 seeds
have 10 distinct resamples, 5 have 126, and it has no small-sample factor), while the t interval ignores the finite
problem set. A verdict must hold under both, so the rule reads the smallest interval that contains both.

The verdict follows from the interval ``[lo, hi]`` of the effect signed in the claimed direction, and nothing else:

- **reproduced**: ``lo > 0`` (the interval excludes 0 in the claimed direction);
- **not reproduced**: ``hi < threshold``, the paper's effect or the smallest effect of interest (the interval excludes
  it: any effect there is smaller than claimed, or opposite);
- **inconclusive**: neither.

`minimum_detectable_effect` gives the effect this design would detect with 80 % power at this level:
``(z_{1−α/2} + z_{0.8}) · se`` from the bootstrap's standard error, or ``(t_{0.975, n−1} + z_{0.8}) · sd / √n`` from
the seed means, whichever is larger (the hull is at least as wide as either). Pure numpy; no trainer, no study.
"""

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np


VERDICTS = ("reproduced", "not reproduced", "inconclusive")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One pre-declared comparison: ``arm`` against ``baseline`` on ``metric``, in ``direction`` (+1: the arm is
    claimed higher, −1: lower), with the paper's effect size or a smallest effect of interest (in the metric's units,
    signed in the claimed direction, so positive).

    The rest says where the claim is judged and how to read it (the page renderer, `trl_rlvr_ext.studies.report`,
    reads them): ``reason`` says where the effect size comes from (the paper's table, or why that smallest effect);
    ``tasks`` / ``settings`` restrict the claim to some of the study's tasks and settings (empty: every one where both
    arms ran); ``part_of`` names the claim this one is a part of (a claim with parts is "mixed" when its parts'
    verdicts differ); ``exploratory`` says why the comparison was set after looking at the data, as a short label, ": "
    and the details (empty: pre-declared); ``requires`` names a claim that must be reproduced on a task for this
    claim's part there to count (a boundary claim needs a task whose trivial policy stays below the base): elsewhere
    the part is shown, not counted.
    A ``baseline`` of ``"trivial*"`` stands for the task's strongest trivial-policy baseline at the claim's k (the arm
    named ``trivial...`` with the highest mean).
    """

    name: str
    arm: str
    baseline: str
    metric: str
    direction: int = 1
    paper_effect: float | None = None
    smallest_effect: float | None = None
    reason: str = ""
    tasks: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    part_of: str = ""
    exploratory: str = ""
    requires: str = ""

    def __post_init__(self):
        if self.direction not in (1, -1):
            raise ValueError(f"direction must be +1 (arm higher) or -1 (arm lower), got {self.direction}.")
        threshold = self.threshold
        if threshold is None:
            raise ValueError(
                f"Claim {self.name!r} needs paper_effect or smallest_effect: without one, 'not reproduced' is "
                "undefined (no effect size can be excluded)."
            )
        if not threshold > 0:
            raise ValueError(
                f"Claim {self.name!r}: the effect to exclude must be > 0 (signed in the claimed direction)."
            )

    @property
    def threshold(self) -> float | None:
        return self.paper_effect if self.paper_effect is not None else self.smallest_effect

    @property
    def k(self) -> int:
        """The ``k`` of a ``pass@k`` metric (the only metric the renderer judges: per problem, from the counts)."""
        prefix, _, k = self.metric.partition("@")
        if prefix != "pass" or not k.isdigit() or int(k) < 1:
            raise ValueError(f"Claim {self.name!r}: metric {self.metric!r} is not 'pass@<k>' with k >= 1.")
        return int(k)


@dataclasses.dataclass(frozen=True)
class Judgement:
    """A claim's effect, interval, minimum detectable effect and the verdict the rule gives."""

    claim: Claim
    effect: float  # signed in the claimed direction
    low: float  # the decision interval: the hull of the bootstrap and seed-t intervals
    high: float
    minimum_detectable_effect: float
    num_seeds: int
    num_problems: int
    verdict: str
    bootstrap_low: float = float("nan")  # `hierarchical_bootstrap`'s percentile interval
    bootstrap_high: float = float("nan")
    seed_t_low: float = float("nan")  # `seed_t_interval`
    seed_t_high: float = float("nan")


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


def hierarchical_bootstrap(differences: np.ndarray, num_resamples: int = 10_000, seed: int = 0) -> np.ndarray:
    """Means of ``num_resamples`` two-level resamples of ``differences`` (seeds × problems): seeds with replacement,
    then problems with replacement within each drawn seed (drawn in chunks, so memory stays bounded)."""
    differences = np.asarray(differences, dtype=float)
    num_seeds, num_problems = differences.shape
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, num_resamples, 1000):
        size = min(1000, num_resamples - start)
        seed_draws = rng.integers(0, num_seeds, size=(size, num_seeds))
        problem_draws = rng.integers(0, num_problems, size=(size, num_seeds, num_problems))
        means.append(differences[seed_draws[..., None], problem_draws].mean(axis=(1, 2)))
    return np.concatenate(means)


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def minimum_detectable_effect(standard_error: float, confidence: float = 0.95, power: float = 0.8) -> float:
    """The smallest true effect this design detects (interval excludes 0) with probability ``power``."""
    return (_normal_quantile(1 - (1 - confidence) / 2) + _normal_quantile(power)) * standard_error


def decide(low: float, high: float, threshold: float) -> str:
    """The verdict of an interval ``[low, high]`` of an effect signed in the claimed direction (see the module)."""
    if not low <= high:
        raise ValueError(f"An interval needs low <= high, got [{low}, {high}].")
    if low > 0:
        return "reproduced"
    if high < threshold:
        return "not reproduced"
    return "inconclusive"


def judge(
    claim: Claim,
    arm: Mapping[int, Sequence[float]],
    baseline: Mapping[int, Sequence[float]],
    confidence: float = 0.95,
    num_resamples: int = 10_000,
    seed: int = 0,
) -> Judgement:
    """The claim judged on per-seed, per-problem values of its metric (e.g. each problem's unbiased pass@k)."""
    differences = claim.direction * paired_differences(arm, baseline)
    means = hierarchical_bootstrap(differences, num_resamples=num_resamples, seed=seed)
    alpha = 1 - confidence
    boot_low, boot_high = (float(v) for v in np.quantile(means, [alpha / 2, 1 - alpha / 2]))
    if confidence != 0.95:
        raise ValueError(f"The seed t interval is tabulated at 95 % only; got confidence={confidence}.")
    t_low, t_high = seed_t_interval(differences)
    low, high = min(boot_low, t_low), max(boot_high, t_high)
    mde = max(minimum_detectable_effect(float(means.std(ddof=1)), confidence), seed_t_detectable_effect(differences))
    return Judgement(
        claim=claim,
        effect=float(differences.mean()),
        low=low,
        high=high,
        minimum_detectable_effect=mde if math.isfinite(mde) else float("nan"),
        num_seeds=differences.shape[0],
        num_problems=differences.shape[1],
        verdict=decide(low, high, claim.threshold),
        bootstrap_low=boot_low,
        bootstrap_high=boot_high,
        seed_t_low=t_low,
        seed_t_high=t_high,
    )


# Student's t quantile t_{0.975, df}, df = 1..30 (no scipy here); above 30 the normal quantile is within 4 % of it.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def _seed_means_t(differences: np.ndarray) -> tuple[np.ndarray, float]:
    seed_means = np.asarray(differences, dtype=float).mean(axis=1)
    n = seed_means.size
    if n < 2:
        raise ValueError(f"A t interval over seeds needs at least 2 seeds, got {n}.")
    return seed_means, (_T975[n - 2] if n - 1 <= len(_T975) else _normal_quantile(0.975))


def seed_t_interval(differences: np.ndarray) -> tuple[float, float]:
    """The 95 % t interval of the per-seed mean differences (seeds as the only unit, ``n − 1`` degrees of freedom):
    one half of the rule's hull. With few seeds the percentile bootstrap is too narrow at the seed level (3 seeds have
    10 distinct resamples, and it has no small-sample factor); this interval is not."""
    seed_means, t = _seed_means_t(differences)
    half = t * float(seed_means.std(ddof=1)) / math.sqrt(seed_means.size)
    return float(seed_means.mean()) - half, float(seed_means.mean()) + half


def seed_t_detectable_effect(differences: np.ndarray, power: float = 0.8) -> float:
    """The seed-level design's minimum detectable effect: ``(t_{0.975, n−1} + z_power) · sd(seed means) / √n``."""
    seed_means, t = _seed_means_t(differences)
    return (t + _normal_quantile(power)) * float(seed_means.std(ddof=1)) / math.sqrt(seed_means.size)
