"""Do SELF's mechanisms *predict* the shrink? Winner-take-all from the evaluation records, judged across units.

SELF (arXiv 2510.02230) explains why on-policy RLVR lowers Pass@k at large k below the base model by (a) negative
interference and (b) winner-take-all. That a mechanism *occurs* says little; if it is the cause, then where there is
more of it the pass@n change should be lower. This module judges that: a *unit* is (task, setting, trained arm), and
`prediction` is Spearman's ρ across units between a mechanism metric and the unit's pass@n change (n = num_samples),
with a percentile bootstrap interval over units and the verdict of `verdicts.decide` (claimed direction: ρ < 0), made
**reversed** by the claims' own rule (`verdicts.with_reversal`) where the interval excludes 0 on the other side.

The probe's ``boundary/winner_take_all`` (Spearman of the base gold log-likelihood ``b_i`` against its change) is
biased negative by construction: ``log p <= 0`` caps what a likely problem can gain, not what an unlikely one can.
`winner_take_all` here works in probability space, on the records' per-problem pass rates, and ranks problems by base
samples *independent* of the ones it subtracts (see `difficulty_ranks`), so that no sign is built in.
"""

import dataclasses

import numpy as np

from .markdown import mean_sd
from .records import end_probe
from .verdicts import decide, with_reversal


SMALLEST_RHO = 0.3  # smallest |ρ| of interest: below it a mechanism explains under ~10 % of the rank variance
MIN_UNITS = 4  # below this a rank correlation's bootstrap has too few distinct resamples to mean anything


def _base_by_seed(base_records: list[dict]) -> dict[int, dict]:
    """The task's base records by seed; a base evaluation recorded twice (in two settings' files) counts once."""
    by_seed: dict[int, dict] = {}
    for r in base_records:
        if r["arm"] != "base":
            raise ValueError(f"Expected base records only, got arm {r['arm']!r} (seed {r['seed']}).")
        seen = by_seed.setdefault(r["seed"], r)
        if seen["num_correct"] != r["num_correct"] or seen["task"] != r["task"]:
            raise ValueError(f"Two different base records for task {r['task']!r}, seed {r['seed']}: keep one.")
    if len({(r["task"], len(r["num_correct"]), r["num_samples"]) for r in by_seed.values()}) > 1:
        raise ValueError("The base records mix tasks or evaluation sizes: pass one task's base records.")
    return by_seed


def difficulty_ranks(base_records: list[dict], exclude_seed: int) -> np.ndarray:
    """Each problem's base pass rate pooled over the base records whose seed is not ``exclude_seed`` (independent
    samples of the same untrained model): what `quintile_deltas` ranks problems by.

    Why not the same seed: ranking by the very samples one then subtracts selects their noise (a problem ranked top is
    partly there by luck, so its next sample is lower): regression to the mean makes the bottom look like it gains and
    the top like it loses, a negative winner-take-all out of nothing. Independent samples only blur the ranking (a
    bias towards 0, never a sign)."""
    others = [r for seed, r in _base_by_seed(base_records).items() if seed != exclude_seed]
    if not others:
        raise ValueError(
            f"Ranking problems independently of seed {exclude_seed} needs >= 2 base seeds of the task (got only "
            f"{sorted(r['seed'] for r in base_records)}): evaluate the base model with another seed."
        )
    correct = np.sum([r["num_correct"] for r in others], axis=0)
    return correct / sum(r["num_samples"] for r in others)


def _pass_rates(record: dict) -> np.ndarray:
    return np.asarray(record["num_correct"], dtype=float) / record["num_samples"]


def quintile_deltas(arm_record: dict, base_records: list[dict], num_groups: int = 5) -> np.ndarray:
    """Mean change in pass@1 (the arm's c/n minus the SAME-seed base's c/n) per group of problems, the groups cut by
    the independent base pass rate (`difficulty_ranks`), lowest base likelihood first.

    Groups: problems sorted by that rate, ties broken by problem index (a stable sort: deterministic), cut into
    ``num_groups`` groups as equal as ``numpy.array_split`` makes them (earlier groups take any remainder). The same
    seed's base is subtracted because it shares the arm's evaluation problems and sampling seed (less noise)."""
    base = _base_by_seed(base_records)
    if arm_record["seed"] not in base:
        raise ValueError(f"No base record of seed {arm_record['seed']} to pair {arm_record['arm']!r} with.")
    paired = base[arm_record["seed"]]
    if len(arm_record["num_correct"]) != len(paired["num_correct"]) or arm_record["task"] != paired["task"]:
        raise ValueError(f"{arm_record['arm']!r} seed {arm_record['seed']}: not the base's task and problems.")
    return _group_means(_pass_rates(arm_record) - _pass_rates(paired), base_records, arm_record["seed"], num_groups)


def _group_means(values: np.ndarray, base_records: list[dict], seed: int, num_groups: int) -> np.ndarray:
    order = np.argsort(difficulty_ranks(base_records, seed), kind="stable")
    return np.array([values[group].mean() for group in np.array_split(order, num_groups)])


def winner_take_all(arm_record: dict, base_records: list[dict], num_groups: int = 5) -> float:
    """Top group's mean Δpass@1 minus the bottom group's (positive: the likely got likelier relative to the unlikely).

    Why unbiased: with no winner-take-all (every problem's pass probability moves by the same amount, or not at all)
    its expectation is 0: the grouping is independent of both samples it subtracts (no regression to the mean), and a
    pass rate can move as far up as down in the middle of [0, 1] (no log cap). Caveat: the ceiling is not gone, it is
    in probability space and symmetric around 0.5: a problem at 1 cannot rise, one at 0 cannot fall, so a top group
    near 1 pulls it down and a bottom group near 0 pulls it up. Read the per-group deltas (`quintile_table_markdown`)
    to see where the groups sit."""
    deltas = quintile_deltas(arm_record, base_records, num_groups)
    return float(deltas[-1] - deltas[0])


def _shrink(arm_record: dict, base_record: dict) -> float:
    """pass@n change at n = num_samples: per problem, pass@n is 1 iff any of the n samples was correct (exact)."""
    return float(
        np.mean(np.asarray(arm_record["num_correct"]) > 0) - np.mean(np.asarray(base_record["num_correct"]) > 0)
    )


def _last_probe(record: dict, key: str) -> float:
    probe = end_probe(record)
    return float(probe.get(key, float("nan"))) if probe is not None else float("nan")


def units_from_records(records: list[dict], settings: list[tuple[str, dict]], num_groups: int = 5) -> list[dict]:
    """The units (task, setting, trained arm) of ``records``: per unit, over its seeds, the mean `winner_take_all`,
    ``interference_frac`` and the probe's ``winner_take_all`` (log-probability, for contrast) at the last probe step,
    the mean per-group deltas and the ``shrink`` (mean of arm pass@n − same-seed base pass@n). ``settings``: (name,
    match) pairs, a trained record in the setting whose ``match`` items all equal its ``sizes``'. Base records belong
    to every setting of their task (an untrained model has no training sizes). Only arms with >= 2 seeds that have
    the same-seed base make a unit. An arm whose every seed's evaluation (``num_correct``) equals an earlier arm's of
    the same task and setting trained the same model (``grpo_same_budget`` where SELF skipped no step is GRPO itself)
    and is not a unit of its own: a repeated point would count one model twice in the correlation."""
    units = []
    for task in dict.fromkeys(r["task"] for r in records):
        bases = [r for r in records if r["task"] == task and r["arm"] == "base"]
        base = _base_by_seed(bases) if bases else {}
        for name, match in settings:
            runs: dict[str, dict[int, dict]] = {}
            for r in records:
                same = r["task"] == task and r["arm"] != "base" and r["seed"] in base
                if same and all(r["sizes"].get(k) == v for k, v in match.items()):
                    runs.setdefault(r["arm"], {}).setdefault(r["seed"], r)  # a run recorded twice counts once
            evaluations = []
            for arm, by_seed in runs.items():
                if len(by_seed) < 2:
                    continue
                seeds = sorted(by_seed)
                evaluation = [(s, by_seed[s]["num_correct"]) for s in seeds]
                if evaluation in evaluations:
                    continue
                evaluations.append(evaluation)
                per_seed = [quintile_deltas(by_seed[s], bases, num_groups) for s in seeds]
                units.append(
                    {
                        "task": task,
                        "setting": name,
                        "arm": arm,
                        "seeds": seeds,
                        "group_deltas": np.mean(per_seed, axis=0).tolist(),
                        "winner_take_all": float(np.mean([d[-1] - d[0] for d in per_seed])),
                        "interference_frac": float(
                            np.mean([_last_probe(by_seed[s], "boundary/interference_frac") for s in seeds])
                        ),
                        "probe_winner_take_all": float(
                            np.mean([_last_probe(by_seed[s], "boundary/winner_take_all") for s in seeds])
                        ),
                        "shrink": float(np.mean([_shrink(by_seed[s], base[s]) for s in seeds])),
                    }
                )
    return units


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's ρ of each row pair (average ranks for ties), NaN where a row is constant. Vectorised over rows for
    the bootstrap (the probe's `evaluation.boundary.spearman` is per pair, and its module pulls in torch)."""

    def ranks(v):
        less = (v[:, None, :] < v[:, :, None]).sum(axis=2)
        equal = (v[:, None, :] == v[:, :, None]).sum(axis=2)
        r = less + (equal + 1) / 2
        return r - r.mean(axis=1, keepdims=True)

    rx, ry = ranks(x), ranks(y)
    denominator = np.sqrt((rx**2).sum(axis=1) * (ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (rx * ry).sum(axis=1) / denominator, np.nan)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Whether ``metric`` predicts the shrink across ``num_units`` units: ρ, its 95 % interval, the verdict."""

    metric: str
    num_units: int
    rho: float
    low: float
    high: float
    verdict: str
    reason: str = ""
    degenerate_resamples: int = 0  # resamples with constant ranks on a side (no ρ): left out of the interval
    interval_verdict: str = ""  # the interval's own verdict (before v4's reversed), where it was formed


def prediction(units: list[dict], metric: str, num_resamples: int = 10_000, seed: int = 0) -> Prediction:
    """Spearman's ρ across units between ``metric`` and ``shrink``, a 95 % percentile bootstrap interval (units
    resampled with replacement, ``seed`` fixed), and `verdicts.decide` on the interval signed so that the claimed
    direction (ρ < 0: more of the mechanism, lower pass@n change) is positive, against |ρ| = `SMALLEST_RHO`.
    Units where the metric or shrink is NaN (no probe) are left out. A resample with constant ranks on either side has
    no ρ; it is left out, and counted in ``degenerate_resamples``."""
    pairs = np.array([(u[metric], u["shrink"]) for u in units], dtype=float).reshape(-1, 2)
    pairs = pairs[np.isfinite(pairs).all(axis=1)]
    n = len(pairs)
    rho = float(_spearman_rows(pairs[None, :, 0], pairs[None, :, 1])[0]) if n >= 2 else float("nan")
    nan = float("nan")
    if n < MIN_UNITS:
        return Prediction(metric, n, rho, nan, nan, "inconclusive", f"{n} units: a rank correlation needs >= 4")
    if not np.isfinite(rho):
        return Prediction(metric, n, rho, nan, nan, "inconclusive", "constant across units: no rank correlation")
    rng = np.random.default_rng(seed)
    rhos = []
    for start in range(0, num_resamples, 1000):  # in chunks, so memory stays bounded (resamples × units²)
        draws = rng.integers(0, n, size=(min(1000, num_resamples - start), n))
        rhos.append(_spearman_rows(pairs[draws, 0], pairs[draws, 1]))
    rhos = np.concatenate(rhos)
    valid = rhos[np.isfinite(rhos)]
    low, high = (float(v) for v in np.quantile(valid, [0.025, 0.975]))
    interval_verdict = decide(-high, -low, SMALLEST_RHO)  # signed: claimed direction positive, threshold |ρ| = 0.3
    verdict = with_reversal(interval_verdict, -low)  # ρ > 0 throughout: more of it, a *higher* pass@n change
    return Prediction(
        metric,
        n,
        rho,
        low,
        high,
        verdict,
        degenerate_resamples=int(rhos.size - valid.size),
        interval_verdict=interval_verdict,
    )


def quintile_table_markdown(records: list[dict], base_records: list[dict] | None = None, num_groups: int = 5) -> str:
    """A markdown table, one row per trained arm of ``records`` (one task, one setting): per group of problems (q1:
    the least likely by the independent base pass rate) the mean Δpass@1 ± sd over seeds, and `winner_take_all`.
    ``base_records``: the task's base records (default: those among ``records``). Seeds without a base are skipped."""
    bases = base_records if base_records is not None else [r for r in records if r["arm"] == "base"]
    trained = [r for r in records if r["arm"] != "base"]
    if len({r["task"] for r in trained + bases}) > 1:
        raise ValueError("quintile_table_markdown takes one task's records.")
    if len({(r["sizes"].get("max_steps"), r["sizes"].get("learning_rate")) for r in trained}) > 1:
        raise ValueError("quintile_table_markdown takes one setting's trained records (one max_steps, lr).")
    base = _base_by_seed(bases)
    groups = " | ".join(f"Δpass@1 q{g}" for g in range(1, num_groups + 1))
    lines = [
        f"| arm | seeds | {groups} | winner_take_all (q{num_groups} − q1) |",
        "|---|---|" + "---|" * (num_groups + 1),
    ]
    # the base's own pass@1 per group (not a change): where the groups sit against the ceiling at 1 and floor at 0
    levels = [_group_means(_pass_rates(r), bases, s, num_groups) for s, r in sorted(base.items())] if base else []
    if len(levels) > 1:
        cells = " | ".join(
            mean_sd([v[g] for v in levels], signed=True, keep_nan=True).lstrip("+") for g in range(num_groups)
        )
        lines.append(f"| base (pass@1 level, not Δ) | {','.join(map(str, sorted(base)))} | {cells} | |")
    for arm in dict.fromkeys(r["arm"] for r in trained):
        runs = list({r["seed"]: r for r in trained if r["arm"] == arm and r["seed"] in base}.values())
        if not runs:
            continue
        per_seed = [quintile_deltas(r, bases, num_groups) for r in sorted(runs, key=lambda r: r["seed"])]
        cells = [mean_sd([d[g] for d in per_seed], signed=True, keep_nan=True) for g in range(num_groups)]
        cells.append(mean_sd([d[-1] - d[0] for d in per_seed], signed=True, keep_nan=True))
        seeds = ",".join(str(r["seed"]) for r in sorted(runs, key=lambda r: r["seed"]))
        lines.append(f"| {arm} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def prediction_rule_changes(results: list[Prediction], title: str, link: str) -> str:
    """The metrics whose verdict v4's **reversed** moved from their interval's own (`Prediction.interval_verdict`), as
    the index's list of rule changes renders a claim: ``- *title* (link), parts:`` and one line per metric, old → new
    and why; ``"- none"`` where none moved."""
    moved = [p for p in results if p.interval_verdict and p.verdict != p.interval_verdict]
    if not moved:
        return "- none"
    lines = [f"- *{title}* ({link}), by prediction:"]
    lines += [
        f"    - {p.metric}: {p.interval_verdict} → {p.verdict} (the interval of ρ excludes 0 on the other side: more "
        "of the metric went with a higher change of pass@n)"
        for p in moved
    ]
    return "\n".join(lines)


def prediction_table_markdown(results: list[Prediction]) -> str:
    """A markdown table of `prediction` results: one row per metric (claimed: ρ < 0, smallest effect |ρ| = 0.3)."""
    lines = ["| metric | units | ρ (metric, Δpass@n) | 95 % interval | verdict |", "|---|---|---|---|---|"]
    for p in results:
        interval = f"[{p.low:+.2f}, {p.high:+.2f}]" if np.isfinite(p.low) else "—"
        verdict = f"{p.verdict} ({p.reason})" if p.reason else p.verdict
        lines.append(f"| {p.metric} | {p.num_units} | {p.rho:+.2f} | {interval} | {verdict} |")
    return "\n".join(lines) + "\n"
