"""The gold-vs-KL frontier compared at matched KL: IS-DAA's actual claim (arXiv 2506.08681), judged per KL value.

IS-DAA claims a better *frontier*: at the same KL(π_θ || π_ref), the importance-weighted run has the higher gold
metric. Two runs' final models sit at different KL, and their frontier points were measured at the same *steps*, not
at the same KL, so no two measured points pair. This module pairs them at KL values declared before looking:

- `gold_at_kl`: one run's gold metric (held-out greedy accuracy, or pass@1) at a KL value, linearly interpolated
  between the two measured frontier points around it. Only inside the run's measured KL range: outside it the value
  is ``None``, never extrapolated. A run that stopped at KL 1.0 says nothing about KL 2.0; a line drawn past its last
  point would be a guess about training it never did, and over-optimisation (the claim under test) is exactly a
  bend of that line, so extrapolation would assume the answer.
- `compare_at_kl`: an arm against its baseline at each KL of a grid, paired by seed (the same seed of both arms: the
  same preference data order and the same measurement samples). The per-seed differences give a mean and a 95 %
  Student-t interval over seeds, and the project's rule (`lab.studies.verdicts.decide`) gives the verdict
  against a declared smallest effect of interest.

Why a t interval over seeds only, and not the project's hull with a per-problem bootstrap: an interpolated frontier
value is an aggregate over the frontier's problems at two steps, mixed by the interpolation weight, and those weights
differ between the arm and its baseline (each run crosses a KL value between its own steps). There is no
per-problem value of "greedy accuracy at KL 0.5" to pair across arms, so the seed is the only unit that pairs; with
3-5 seeds the Student factor (t_{0.975, 4} = 2.78) is what keeps the interval honest.

Pure numpy: no trainer, no study.
"""

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from .verdicts import holm_decisions, seed_t_interval


GOLD_KEYS = ("greedy_acc", "pass1")


def gold_at_kl(frontier: Sequence[Mapping], kl: float, key: str = "greedy_acc") -> float | None:
    """One run's ``key`` (a gold metric of its frontier points) at KL ``kl``, or ``None`` outside its measured range.

    ``frontier`` is a run's list of measurements (``step``, ``kl`` and ``key`` each), taken in step order. The value
    is read where the run's trajectory, a polyline in step order, first reaches ``kl``: a measured point at exactly
    that KL gives its own value; else the first segment whose two ends straddle ``kl`` is linearly interpolated. Where
    the KL grows with the steps (as under DPO) this is ordinary linear interpolation of gold against KL; where the
    sampled KL estimate wobbles, the first crossing is the earliest time the run was at that KL (later crossings are
    the same KL reached again, further into training). Inside ``[min KL, max KL]`` a crossing always exists (the
    polyline is continuous); outside it the answer is ``None``: never extrapolate.
    """
    if not math.isfinite(kl):
        raise ValueError(f"kl={kl} must be a finite number.")
    points = sorted(frontier, key=lambda entry: entry["step"])
    if not points:
        raise ValueError("An empty frontier: a run needs at least one measured point.")
    kls = np.asarray([entry["kl"] for entry in points], dtype=float)
    values = np.asarray([entry[key] for entry in points], dtype=float)
    if not (np.isfinite(kls).all() and np.isfinite(values).all()):
        raise ValueError(f"The frontier holds a non-finite KL or {key!r}: {list(zip(kls.tolist(), values.tolist()))}.")
    for i in range(len(points)):
        if i and (kls[i - 1] - kl) * (kls[i] - kl) < 0:  # the segment (i - 1, i) strictly straddles kl
            weight = (kl - kls[i - 1]) / (kls[i] - kls[i - 1])
            return float(values[i - 1] + weight * (values[i] - values[i - 1]))
        if kls[i] == kl:
            return float(values[i])
    return None


@dataclasses.dataclass(frozen=True)
class MatchedKLClaim:
    """A pre-declared comparison of two arms' frontiers at matched KL: ``arm`` against ``baseline`` on ``metric`` (a
    frontier key of `GOLD_KEYS`), claimed higher (``direction`` +1) or lower (−1), with a smallest effect of interest
    in the metric's units (positive, signed in the claimed direction). ``settings`` restricts it to some settings of
    the study (empty: every one); ``reason`` says where the effect size comes from."""

    name: str
    arm: str
    baseline: str
    metric: str = "greedy_acc"
    direction: int = 1
    smallest_effect: float = 0.02
    reason: str = ""
    settings: tuple[str, ...] = ()

    def __post_init__(self):
        if self.metric not in GOLD_KEYS:
            raise ValueError(f"Claim {self.name!r}: metric {self.metric!r} is not a frontier gold key {GOLD_KEYS}.")
        if self.direction not in (1, -1):
            raise ValueError(f"direction must be +1 (arm higher) or -1 (arm lower), got {self.direction}.")
        if not self.smallest_effect > 0:
            raise ValueError(f"Claim {self.name!r}: smallest_effect must be > 0 (signed in the claimed direction).")


@dataclasses.dataclass(frozen=True)
class MatchedKLComparison:
    """One claim at one KL: the seeds where both arms reached that KL, their differences (arm − baseline, signed in
    the claimed direction), the mean, the 95 % t interval over seeds (``None`` below 2 seeds) and the verdict.
    ``missing`` lists the seeds both arms ran on where at least one never reached that KL."""

    claim: MatchedKLClaim
    kl: float
    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float | None
    low: float | None
    high: float | None
    verdict: str
    missing: tuple[int, ...] = ()


def compare_at_kl(
    claim: MatchedKLClaim,
    arm_runs: Mapping[int, Sequence[Mapping]],
    baseline_runs: Mapping[int, Sequence[Mapping]],
    kl_grid: Sequence[float],
) -> list[MatchedKLComparison]:
    """``claim`` judged at each KL of ``kl_grid`` (declared before looking) on frontiers keyed by seed.

    At each KL, a seed counts only where both arms' frontiers reach it (`gold_at_kl` is not ``None`` for both); its
    difference is ``direction · (arm − baseline)``. With at least 2 such seeds the interval is
    `lab.studies.verdicts.seed_t_interval` of those differences, and the verdicts of the grid's points
    are `lab.studies.verdicts.holm_decisions` over them (one family per claim: the rule's one-sided t tests
    against 0 and ``claim.smallest_effect``, stepped down by Holm); with fewer than 2 seeds the verdict is
    "inconclusive" (one seed has no spread to judge it by), the point is not in the family, and the interval is
    ``None``.
    """
    if not kl_grid:
        raise ValueError("An empty KL grid: declare the KL values to compare at (e.g. 0.25, 0.5, 1.0).")
    common = sorted(set(arm_runs) & set(baseline_runs))
    points = []
    for kl in kl_grid:
        seeds, differences, missing = [], [], []
        for seed in common:
            a = gold_at_kl(arm_runs[seed], kl, claim.metric)
            b = gold_at_kl(baseline_runs[seed], kl, claim.metric)
            if a is None or b is None:
                missing.append(seed)
                continue
            seeds.append(seed)
            differences.append(claim.direction * (a - b))
        points.append((float(kl), seeds, differences, missing))
    # The grid is one family: Holm's step-down over the points with at least 2 seeds (`holm_decisions`) keeps the
    # family-wise error of each kind of verdict at the 95 % interval's 2.5 % per end; the interval shown is each
    # point's own (unadjusted) t interval.
    testable = [i for i, (_, _, differences, _) in enumerate(points) if len(differences) >= 2]
    stats = [np.asarray(points[i][2], dtype=float) for i in testable]
    verdicts = holm_decisions(
        [float(d.mean()) for d in stats],
        [float(d.std(ddof=1)) / math.sqrt(d.size) for d in stats],
        [d.size - 1 for d in stats],
        claim.smallest_effect,
    )
    judged = dict(zip(testable, verdicts))
    comparisons = []
    for i, (kl, seeds, differences, missing) in enumerate(points):
        mean = float(np.mean(differences)) if differences else None
        low = high = None
        if i in judged:
            low, high = seed_t_interval(np.asarray(differences, dtype=float)[:, None])
        verdict = judged.get(i, "inconclusive")
        comparisons.append(
            MatchedKLComparison(claim, kl, tuple(seeds), tuple(differences), mean, low, high, verdict, tuple(missing))
        )
    return comparisons


def frontiers_by_seed(records: Sequence[Mapping], arm: str, key: str = "frontier") -> dict[int, list]:
    """``{seed: frontier}`` of one arm's records (one task and setting), from the record key ``key`` (``frontier``:
    the test problems; ``frontier_validation``: the validation problems). Records without it are left out."""
    return {r["seed"]: r[key] for r in records if r["arm"] == arm and r.get(key)}


def compare_records(
    claims: Sequence[MatchedKLClaim],
    records: Sequence[Mapping],
    kl_grid: Sequence[float],
    key: str = "frontier",
) -> list[MatchedKLComparison]:
    """Every claim whose two arms both have records, at every KL of the grid (records of one task and setting)."""
    out = []
    for claim in claims:
        arm, baseline = frontiers_by_seed(records, claim.arm, key), frontiers_by_seed(records, claim.baseline, key)
        if arm and baseline:
            out += compare_at_kl(claim, arm, baseline, kl_grid)
    return out


def _signed(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:+.{digits}f}"


def matched_kl_table(comparisons: Sequence[MatchedKLComparison]) -> str:
    """A markdown table of `compare_at_kl` results: one row per (claim, KL); the differences are signed so that the
    claimed direction is positive."""
    lines = [
        "| comparison | metric | KL | seeds | mean difference | 95 % t interval (seeds) | verdict (Holm over the KL grid) |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        sign = "" if c.claim.direction == 1 else "−"
        seeds = f"{len(c.seeds)} ({', '.join(map(str, c.seeds))})" if c.seeds else "0"
        if c.missing:
            seeds += f"; not reached: {', '.join(map(str, c.missing))}"
        interval = "-" if c.low is None else f"[{c.low:+.3f}, {c.high:+.3f}]"
        lines.append(
            f"| {sign}({c.claim.arm} − {c.claim.baseline}) | {c.claim.metric} | {c.kl:g} | {seeds} | "
            f"{_signed(c.mean)} | {interval} | {c.verdict} |"
        )
    return "\n".join(lines)
