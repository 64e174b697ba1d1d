"""The verdict rule of a study: a pre-declared, paired comparison with a 95 % interval, judged mechanically.

A claim names an arm, its baseline, a metric and the claimed direction, and, where the paper gives one, the paper's
effect size (else a smallest effect of interest). The effect is the **paired** difference, arm minus baseline, on the
same seeds and the same problems:

    d[s, p] = metric_arm[s, p] − metric_baseline[s, p]        (seed s, problem p)
    effect  = mean_s mean_p d[s, p]

**The design is crossed** (evidence v3): every seed runs on the same problems, so a problem's effect is shared by every
seed. The model is d[s, p] = μ + a_s + b_p + e_sp (seed, problem and residual terms), whose grand mean has variance

    Var(effect) = σ²_seed / S + σ²_problem / P + σ²_residual / (S P).

An earlier rule redrew the problems separately within each drawn seed, which shrinks the problem term by S; its
seed-t half ignored the problem term. The interval is now the **hull of two 95 % intervals**, both crossed:

- a **crossed bootstrap** (`crossed_bootstrap`): each replicate draws the seeds with replacement and ONE problem draw,
  with replacement, shared by every drawn seed; the percentile interval of the replicate means. The pairing is kept
  (a problem's arm and baseline values are resampled together);
- a **crossed t interval** (`crossed_t_interval`): effect ± t_{0.975, ν} · se, with se² = (MS_seed + MS_problem −
  MS_residual) / (S P) from the two-way ANOVA mean squares (the unbiased moment estimate of the variance above,
  floored at max(MS_seed, MS_problem) / (S P), each a lower bound of it) and ν its Satterthwaite degrees of freedom.

Why both: with the few seeds a CPU affords (3-5) the percentile bootstrap is too narrow at the seed level (3 seeds
have 10 distinct resamples, and it has no small-sample factor), which the t quantile at ν degrees of freedom corrects;
the bootstrap does not lean on the normal shape of the effect. A verdict must hold under both.

The verdict follows from the interval ``[lo, hi]`` of the effect signed in the claimed direction, and nothing else:

- **no test**: every paired difference is exactly 0 (e.g. both arms at the ceiling, pass = 1 on every problem and
  seed): the design measured no variation, so no interval can be formed and nothing is judged;
- **reproduced**: ``lo > 0`` (the interval excludes 0 in the claimed direction);
- **not reproduced**: ``hi < threshold``, the paper's effect or the smallest effect of interest (the interval excludes
  it: any effect there is smaller than claimed, or opposite);
- **inconclusive**: none of these.

What the design could see (v4: a verdict says when the design could not have shown the claim):

- **reversed** (a kind of not reproduced): ``hi < 0``, the interval excludes 0 on the wrong side of the claim: the
  effect went significantly the other way;
- **no test** (no headroom): the baseline sits at the bound the claim moves towards (pass = 1 for a claim that the arm
  is higher, pass = 0 for a claim that it is lower) on at least `HEADROOM_SHARE` of the seed × problem cells, so no
  arm can come out beyond it there; it does not override **reproduced** (an interval that excludes 0 found room), and
  `judge` leaves it out (``headroom=False``) where the baseline is a trivial policy: a prerequisite claim ("the base
  is above the trivial policy") asks exactly whether a policy without reasoning reaches the ceiling, so a trivial
  policy at the ceiling is its finding, not a lack of room;
- **no test** (mechanism did not act): a claim that declares a `Gate` (its mechanism must act, e.g. NSR needs the
  clip to cut tokens) where the gate's measure stayed below its minimum (`lab.studies.judging` reads the records);
- **power at the paper's effect** δ, printed beside each verdict (a claim without a paper effect says so), from the
  realised standard error se and degrees of freedom ν of the interval (those of the MDE below), two-sided at 95 %:
  ``power = T_ν(|δ|/se − t_{0.975, ν}) + T_ν(−|δ|/se − t_{0.975, ν})`` (T_ν Student's t distribution, the shifted
  central t as the MDE uses it); a verdict that did not find the effect (not reproduced, inconclusive) whose power is
  below `UNDERPOWERED` reads "underpowered" beside it (a reproduced or reversed interval excluded 0 already). A
  claim without a paper effect gives the power at its stated smallest effect, marked "(stated effect)"
  (which "underpowered" then reads); a non-inferiority claim gives the power to show it when the arm truly equals
  its baseline, ``T_ν(m/se − t_{0.975, ν})`` (`non_inferiority_power`).

A **non-inferiority** claim ("the arm matches the baseline", e.g. an extrapolated checkpoint against the trained one)
sets a ``margin`` m > 0 instead of an effect to exclude: the arm is claimed not worse than the baseline by more than m.
Then **reproduced** if ``lo > −m`` (the interval excludes a loss of m or more), **not reproduced** if ``hi < −m`` (it
excludes every effect above −m: the arm is worse by more than m), else **inconclusive** (`decide_non_inferior`). A
non-inferiority interval with ``hi < 0`` is marked ``measurably_below``: the arm is measurably worse, by less than m
or not.

`judge` also reports the minimum detectable effect, the true effect this design detects with 80 % power at this
level: ``(t_{0.975, ν} + t_{0.8, ν}) · se``, se the larger of the crossed standard error and the bootstrap's.

**Grids** (one claim judged at many points, e.g. matched-KL levels): `holm_decisions` controls the family-wise error of
the grid's verdicts by Holm's step-down over the one-sided t tests behind them (α = 0.025 each way, as the 95 %
interval's ends are), stated on every page that shows a grid.

Student's t distribution comes from `lab.studies.student_t` (the package does not depend on scipy). Pure
numpy; no trainer, no study.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from trl_rlvr_ext.evaluation.paired import crossed_bootstrap

from .intervals import (  # noqa: F401  (re-exported: the rule's names)
    _nested,
    crossed_standard_error,
    crossed_t_interval,
    headroom_share,
    hierarchical_bootstrap,
    minimum_detectable_effect,
    non_inferiority_power,
    paired_differences,
    power_at,
    seed_t_interval,
)
from .student_t import student_t_cdf


VERDICTS = ("reproduced", "not reproduced", "reversed", "inconclusive", "no test")
NO_TEST = "no test"
REVERSED = "reversed"
# The headroom rule: "no test" where the baseline sits at the claimed bound on at least this share of the cells.
HEADROOM_SHARE = 0.95
# "underpowered" beside a verdict whose power at the paper's effect is below this.
UNDERPOWERED = 0.5
# Why a part is "no test", by cause (`Judgement.no_test`).
IDENTICAL = "identical arms"
NO_HEADROOM = "no headroom"
NO_MECHANISM = "mechanism did not act"


@dataclasses.dataclass(frozen=True)
class Gate:
    """A claim's mechanism gate: the claim is judged only where ``measure`` (of a record: a run) reaches ``minimum``
    in the mean over the seeds, for the arm and for its baseline (the runs the comparison reads); ``label`` names the
    measure as the pages print it, ``reason`` says where the minimum comes from."""

    label: str
    measure: Callable[[dict], float | None]
    minimum: float
    reason: str


@dataclasses.dataclass(frozen=True)
class Claim:
    """One pre-declared comparison: ``arm`` against ``baseline`` on ``metric``, in ``direction`` (+1: the arm is
    claimed higher, −1: lower), with the paper's effect size or a smallest effect of interest (in the metric's units,
    signed in the claimed direction, so positive).

    The rest says where the claim is judged and how to read it (the page renderer, `lab.studies.report`,
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
    margin: float | None = None  # non-inferiority: the arm is claimed not worse than the baseline by more than this
    mechanism: Gate | None = None  # the claim needs its mechanism to act: judged only where the gate holds

    def __post_init__(self):
        if self.direction not in (1, -1):
            raise ValueError(f"direction must be +1 (arm higher) or -1 (arm lower), got {self.direction}.")
        if self.margin is not None:
            if self.paper_effect is not None or self.smallest_effect is not None:
                raise ValueError(
                    f"Claim {self.name!r} sets a margin (non-inferiority) and an effect to exclude: a claim is one or "
                    "the other. Drop paper_effect / smallest_effect, or the margin."
                )
            if not self.margin > 0:
                raise ValueError(
                    f"Claim {self.name!r}: the non-inferiority margin must be > 0 (the loss taken to matter), got "
                    f"{self.margin}."
                )
            return
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
    def to_exclude(self) -> str:
        """What the claim's verdict excludes, as the pages print it: the effect (the paper's or a stated smallest
        one), or for a non-inferiority claim the loss of its margin."""
        if self.margin is not None:
            return f"{-self.margin:+.3f} (margin)"
        return f"{self.threshold:.3f} ({'paper' if self.paper_effect is not None else 'stated'})"

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
    low: float  # the decision interval: the hull of the crossed bootstrap and crossed t intervals
    high: float
    minimum_detectable_effect: float
    num_seeds: int
    num_problems: int
    verdict: str
    bootstrap_low: float = float("nan")  # `crossed_bootstrap`'s percentile interval
    bootstrap_high: float = float("nan")
    t_low: float = float("nan")  # `crossed_t_interval`
    t_high: float = float("nan")
    degrees_of_freedom: float = float("nan")  # the crossed t interval's (Satterthwaite)
    # at the effect to exclude (`power_at`): the paper's, else the stated smallest one; for non-inferiority, to show it
    # at a true difference of 0 (`non_inferiority_power`)
    power: float = float("nan")
    interval_verdict: str = ""  # the verdict of the interval alone (the v3 rule): `verdict` before v4's words
    no_test: str = ""  # why the verdict is no test (IDENTICAL, NO_HEADROOM, NO_MECHANISM + its numbers), else empty
    headroom: float = float("nan")  # the share of cells where the baseline sits at the claimed bound

    @property
    def underpowered(self) -> bool:
        """Power below `UNDERPOWERED` beside a verdict that did not find the effect (not reproduced, inconclusive):
        a reproduced or reversed interval excluded 0, which is what power is the chance of."""
        return self.verdict in ("not reproduced", "inconclusive") and self.power < UNDERPOWERED  # nan: False

    @property
    def measurably_below(self) -> bool:
        """A non-inferiority claim whose interval excludes 0 below: the arm is measurably worse than the baseline."""
        return self.claim.margin is not None and self.high < 0


def decide(low: float, high: float, threshold: float) -> str:
    """The verdict of an interval ``[low, high]`` of an effect signed in the claimed direction (see the module)."""
    if not low <= high:
        raise ValueError(f"An interval needs low <= high, got [{low}, {high}].")
    if low > 0:
        return "reproduced"
    if high < threshold:
        return "not reproduced"
    return "inconclusive"


def with_reversal(verdict: str, high: float, margin: float | None = None) -> str:
    """``verdict`` (of an interval whose high end, signed in the claimed direction, is ``high``) made **reversed**
    where it is not reproduced and the interval excludes 0 on the other side (``high < 0``); a non-inferiority claim
    (``margin``) keeps its verdict (its "measurably below" says the same)."""
    return REVERSED if verdict == "not reproduced" and margin is None and high < 0 else verdict


def decide_non_inferior(low: float, high: float, margin: float) -> str:
    """The verdict of a non-inferiority claim from the interval ``[low, high]`` of the effect (signed in the claimed
    direction) and its ``margin`` (see the module): reproduced if the interval excludes a loss of ``margin`` or more,
    not reproduced if it lies wholly below ``−margin``."""
    if not low <= high:
        raise ValueError(f"An interval needs low <= high, got [{low}, {high}].")
    if not margin > 0:
        raise ValueError(f"A non-inferiority margin must be > 0, got {margin}.")
    if low > -margin:
        return "reproduced"
    if high < -margin:
        return "not reproduced"
    return "inconclusive"


def judge(
    claim: Claim,
    arm: Mapping[int, Sequence[float]],
    baseline: Mapping[int, Sequence[float]],
    confidence: float = 0.95,
    num_resamples: int = 10_000,
    seed: int = 0,
    headroom: bool = True,
) -> Judgement:
    """The claim judged on per-seed, per-problem values of its metric (e.g. each problem's unbiased pass@k);
    ``headroom``: apply the headroom rule (see the module)."""
    differences = claim.direction * paired_differences(arm, baseline)
    num_seeds, num_problems = differences.shape
    at_bound = headroom_share(arm, baseline, claim.direction)
    if not np.any(differences):  # identical arms: no variation measured, nothing to judge
        zero = 0.0
        return Judgement(
            claim,
            zero,
            zero,
            zero,
            float("nan"),
            num_seeds,
            num_problems,
            NO_TEST,
            zero,
            zero,
            zero,
            zero,
            interval_verdict=NO_TEST,
            no_test=IDENTICAL,
            headroom=at_bound,
        )
    means = crossed_bootstrap(differences, num_resamples=num_resamples, seed=seed)
    alpha = 1 - confidence
    boot_low, boot_high = (float(v) for v in np.quantile(means, [alpha / 2, 1 - alpha / 2]))
    t_low, t_high, df = crossed_t_interval(differences, confidence)
    low, high = min(boot_low, t_low), max(boot_high, t_high)
    se = max(crossed_standard_error(differences)[0], float(means.std(ddof=1)))
    mde = minimum_detectable_effect(se, df, confidence)
    interval_verdict = (
        decide(low, high, claim.threshold) if claim.margin is None else decide_non_inferior(low, high, claim.margin)
    )
    verdict, no_test = interval_verdict, ""
    if headroom and interval_verdict != "reproduced" and at_bound >= HEADROOM_SHARE:
        verdict = NO_TEST
        no_test = f"{NO_HEADROOM}: the baseline at pass = {1 if claim.direction == 1 else 0} on {100 * at_bound:.0f} %"
        no_test += " of the seed × problem cells"
    else:
        verdict = with_reversal(interval_verdict, high, claim.margin)
    return Judgement(
        claim=claim,
        effect=float(differences.mean()),
        low=low,
        high=high,
        minimum_detectable_effect=mde if math.isfinite(mde) else float("nan"),
        num_seeds=num_seeds,
        num_problems=num_problems,
        verdict=verdict,
        bootstrap_low=boot_low,
        bootstrap_high=boot_high,
        t_low=t_low,
        t_high=t_high,
        degrees_of_freedom=df,
        power=(
            power_at(claim.threshold, se, df, confidence)
            if claim.margin is None
            else non_inferiority_power(claim.margin, se, df, confidence)
        ),
        interval_verdict=interval_verdict,
        no_test=no_test,
        headroom=at_bound,
    )


def holm_decisions(
    means: Sequence[float],
    standard_errors: Sequence[float],
    degrees_of_freedom: Sequence[float],
    threshold: float,
    alpha: float = 0.025,
) -> list[str]:
    """The verdicts of a grid of comparisons (effects signed in the claimed direction) under Holm's step-down, which
    keeps the family-wise error of each kind of verdict at ``alpha`` (one-sided; 0.025 matches a 95 % interval's end).

    "reproduced" at a point rejects H₀: effect ≤ 0 (p = 1 − T_ν(mean / se)); "not reproduced" rejects H₀': effect ≥
    ``threshold`` (p = T_ν((mean − threshold) / se)). Each family is stepped down on its own: the i-th smallest p of m
    is compared with alpha / (m − i + 1) until the first that fails. A point with se = 0 (no spread) decides by its
    mean alone. With one point this is exactly `decide` on the t interval."""
    m = len(means)
    if not (len(standard_errors) == len(degrees_of_freedom) == m):
        raise ValueError("means, standard_errors and degrees_of_freedom must have one entry per grid point.")

    def p_value(i: int, shift: float, upper: bool) -> float:
        mean, se, df = means[i] - shift, standard_errors[i], degrees_of_freedom[i]
        if se == 0:
            return 0.0 if (mean > 0 if upper else mean < 0) else 1.0
        cdf = student_t_cdf(mean / se, df)
        return 1 - cdf if upper else cdf

    def step_down(p_values: list[float]) -> set[int]:
        rejected = set()
        for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
            if p_values[index] > alpha / (m - rank):
                break
            rejected.add(index)
        return rejected

    above_zero = step_down([p_value(i, 0.0, upper=True) for i in range(m)])
    below_threshold = step_down([p_value(i, threshold, upper=False) for i in range(m)])
    return [
        "reproduced" if i in above_zero else "not reproduced" if i in below_threshold else "inconclusive"
        for i in range(m)
    ]
