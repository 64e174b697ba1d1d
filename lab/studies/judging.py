"""The claims of a page, judged: each claim of a study on each task and setting where its arms ran (`Part`, by
`lab.studies.verdicts.judge` on the paired per-problem pass@k), the requirements between claims, the claims
table. A claim's verdict over its parts, the index's tables and a method page's summary are in
`lab.studies.verdict_index`. No study is named here: a page's own labels and history come with its `Page`.
"""

import dataclasses
import functools
import itertools

import numpy as np

from .markdown import interval, signed, table
from .pages import (
    BOOTSTRAP_SEED,
    NUM_RESAMPLES,
    TRIVIAL_PREFIX,
    PageSetting,
    evaluation_rows,
    is_untrained,
    page_tasks,
    per_problem,
)
from .verdicts import HEADROOM_SHARE, IDENTICAL, NO_MECHANISM, NO_TEST, UNDERPOWERED, Claim, Judgement, judge


@dataclasses.dataclass(frozen=True)
class Part:
    """One claim on one task and setting: its judgement, or why it could not be judged."""

    study: str
    claim: Claim
    setting: PageSetting
    task: str
    baseline: str
    judgement: Judgement | None
    not_judged: str = ""
    near_duplicates: int = 0  # evaluated problems left out: reorderings of a train problem (`judged_problems`)
    # why the part does not count towards its claim's verdict, completed by its task ("claim 0 not reproduced on"
    # <task>: `Claim.requires` unmet there); empty: it counts
    excluded: str = ""
    # why the base this part compares against was chosen after looking at the test problems (`base_reason`), else empty
    base_exploratory: str = ""

    @property
    def looked(self) -> str:
        """Why this part was set after looking at its results (the claim's, the setting's or its base's reason), else
        empty: what the rule marked exploratory before v4."""
        return (
            self.claim.exploratory
            or self.setting.exploratory
            or self.setting.exploratory_tasks.get(self.task, "")
            or self.base_exploratory
        )

    def exploratory_at(self, v3: bool = False) -> str:
        """Every reason this part is exploratory, one a line: `looked`, and (not ``v3``, which read none) its task's
        choice on the problems it is judged on (`PageSetting.selected_on_test`)."""
        return "\n".join(r for r in (self.looked, "" if v3 else self.setting.selected_on_test) if r)

    exploratory = property(exploratory_at)


def arm_values(
    records: list[dict], task: str, arm: str, k: int, keep: np.ndarray | None = None
) -> dict[int, np.ndarray] | str:
    """Per seed, each problem's pass@k of ``arm`` on ``task`` (only the problems ``keep`` marks, where given:
    `judged_problems` gives a mask only where every record of the task measured the same problems)."""
    runs = [r for r in records if r["task"] == task and r["arm"] == arm]
    if not runs:
        return "no run"
    if any(r["num_samples"] < k for r in runs):
        return f"{arm} drew fewer than {k} samples per problem"
    values = {r["seed"]: per_problem(r, k) for r in runs}
    if keep is None:
        return values
    return {seed: v[keep] for seed, v in values.items()}


@functools.cache
def _near_duplicate_flags(dataset: str, start: int, stop: int) -> tuple[bool, ...]:
    from trl_rlvr_ext.tasks.reasoning_gym import near_duplicate_flags

    return tuple(near_duplicate_flags(dataset, start, stop))


def judged_problems(records: list[dict], task: str) -> np.ndarray | None:
    """Which of ``task``'s evaluated problems a comparison judges: every one but the reorderings of a train problem
    (`trl_rlvr_ext.tasks.reasoning_gym.near_duplicate_flags`; on chain_sum the same multiset of signed terms, on
    number_sorting the same numbers), which the base was warm-started on in another order. ``None`` where nothing is
    left out: a task whose records are not of a ``reasoning_gym:`` dataset (the toy's split already keeps a problem
    and its commuted twin together), or whose records measured different problems (the pairing refuses those)."""
    measured = {
        (r["dataset"], evaluation_rows(r))
        for r in records
        if r["task"] == task and str(r.get("dataset", "")).startswith("reasoning_gym:")
    }
    if len(measured) != 1:
        return None
    ((dataset, (start, stop)),) = measured
    keep = ~np.array(_near_duplicate_flags(dataset, start, stop))
    return None if keep.all() else keep


def _strongest_trivial(records: list[dict], task: str, k: int, keep: np.ndarray | None = None) -> list[str]:
    """The trivial policy of ``task`` with the highest mean pass@k on the judged problems (the strongest null; ``[]``
    without one)."""
    scores = {}
    for arm in sorted({r["arm"] for r in records if r["task"] == task and r["arm"].startswith(TRIVIAL_PREFIX)}):
        values = arm_values(records, task, arm, k, keep)
        if not isinstance(values, str):
            scores[arm] = float(np.mean([v.mean() for v in values.values()]))
    return [max(scores, key=scores.get)] if scores else []


def judged_records(records: list[dict]) -> list[dict]:
    """``records`` with each one's per-problem counts cut to its task's judged problems (`judged_problems`), for the
    blocks that read the counts themselves (the boundary per problem, the mechanisms); the records are not changed."""
    keeps = {task: judged_problems(records, task) for task in {r["task"] for r in records}}
    cut = []
    for r in records:
        keep = keeps[r["task"]]
        if keep is not None and len(r["num_correct"]) == keep.size:
            r = {**r, "num_correct": np.asarray(r["num_correct"])[keep].tolist()}
        cut.append(r)
    return cut


def judge_parts(study_name: str, study, setting: PageSetting, records: list[dict]) -> list[Part]:
    """Every claim of the study on every task of the setting where its arms ran (a claim's ``tasks`` / ``settings``
    restrict it). A baseline ``"trivial*"`` is the task's strongest trivial policy at the claim's k; a trivial-policy
    baseline (it does not train) pairs its seeds with the arm's in order, and one with one record with every seed."""
    parts = []
    keeps = {task: judged_problems(records, task) for task in page_tasks(study, records)}
    bases = {task: base_reason(records, task) for task in page_tasks(study, records)}
    for claim in study.claims:
        if claim.settings and setting.name not in claim.settings:
            continue
        for task in page_tasks(study, records):
            if claim.tasks and task not in claim.tasks:
                continue
            keep = keeps[task]
            arm = arm_values(records, task, claim.arm, claim.k, keep)
            if claim.baseline == f"{TRIVIAL_PREFIX}*":
                baselines = _strongest_trivial(records, task, claim.k, keep)
                if not baselines:
                    if arm != "no run":
                        parts.append(
                            Part(study_name, claim, setting, task, claim.baseline, None, "no trivial records")
                        )
                    continue
            else:
                baselines = [claim.baseline]
            for baseline in baselines:
                base = arm_values(records, task, baseline, claim.k, keep)
                if arm == "no run" or base == "no run":
                    continue  # the claim does not apply here
                if isinstance(arm, str) or isinstance(base, str):
                    parts.append(
                        Part(study_name, claim, setting, task, baseline, None, arm if isinstance(arm, str) else base)
                    )
                    continue
                if baseline.startswith(TRIVIAL_PREFIX):
                    base = _paired_trivial(arm, base, cycle=bool(setting.seeds))
                common = sorted(set(arm) & set(base))
                if setting.seeds:
                    common = [seed for seed in common if seed in setting.seeds]
                    if len(common) < len(setting.seeds):
                        reason = f"pending: {len(common)} of {len(setting.seeds)} declared seeds"
                        parts.append(Part(study_name, claim, setting, task, baseline, None, reason))
                        continue
                    arm, base = {s: arm[s] for s in common}, {s: base[s] for s in common}
                if len(common) < 2:
                    parts.append(Part(study_name, claim, setting, task, baseline, None, f"{len(common)} paired seed"))
                    continue
                if any(arm[s].shape != base[s].shape for s in common):
                    parts.append(Part(study_name, claim, setting, task, baseline, None, "different problems"))
                    continue
                judgement = judge(
                    claim,
                    arm,
                    base,
                    num_resamples=NUM_RESAMPLES,
                    seed=BOOTSTRAP_SEED,
                    headroom=not baseline.startswith(TRIVIAL_PREFIX),  # a trivial policy at the ceiling is a finding
                )
                if claim.mechanism is not None and judgement.no_test != IDENTICAL:
                    judgement = _gated(judgement, records, task, (claim.arm, baseline), common)
                dropped = 0 if keep is None else int((~keep).sum())
                # only a comparison that reads the base's own test results can be biased by how the base was chosen
                reads_base = is_untrained(study, claim.arm) or is_untrained(study, baseline)
                part = Part(study_name, claim, setting, task, baseline, judgement, near_duplicates=dropped)
                parts.append(dataclasses.replace(part, base_exploratory=bases[task] if reads_base else ""))
    return parts


def _gated(judgement: Judgement, records: list[dict], task: str, arms: tuple[str, str], seeds: list[int]) -> Judgement:
    """``judgement`` made **no test** where the claim's mechanism gate (`Claim.mechanism`) fails: the mean of the gate's
    measure over the judged seeds' runs, of the arm or of its baseline, below the gate's minimum (a run that logs no
    measure fails it: the gate is not shown to hold)."""
    gate = judgement.claim.mechanism
    means = {}
    for arm in arms:
        values = [gate.measure(r) for r in records if r["task"] == task and r["arm"] == arm and r["seed"] in seeds]
        values = [v for v in values if v is not None]
        means[arm] = float(np.mean(values)) if values else float("nan")
    if all(value >= gate.minimum for value in means.values()):
        return judgement
    shown = " and ".join(f"{value:.4f} ({arm})" for arm, value in means.items())
    reason = f"{NO_MECHANISM}: {gate.label} {shown}, under the {gate.minimum:g} it needs"
    return dataclasses.replace(judgement, verdict=NO_TEST, no_test=reason)


def _paired_trivial(arm: dict, base: dict, cycle: bool) -> dict:
    """A trivial policy's per-seed values keyed by the arm's seeds. The policy does not train: its seeds only resample
    its guesses, so they pair with the arm's seeds in order (seed numbers of the two mean nothing to each other); one
    record pairs with every seed. With ``cycle`` (a setting that declares its seeds, and so judges every one of them)
    a policy with fewer seeds than the arm repeats them in order, ``[0, 1, 2]`` against five seeds giving ``0, 1, 2,
    0, 1``: two of the arm's seeds then share the same guesses, which leaves out a little of the guesses' own spread
    over seeds from the interval; elsewhere the pairs stop at the shorter list, as they always did."""
    if len(base) == 1:
        return {seed: next(iter(base.values())) for seed in arm}
    partners = itertools.cycle(sorted(base)) if cycle else sorted(base)
    return {a: base[b] for a, b in zip(sorted(arm), partners)}


def base_reason(records: list[dict], task: str) -> str:
    """Why ``task``'s base in these records was chosen on the test problems (`base_steps.unvalidated_reason`), else
    empty."""
    from .base_steps import unvalidated_reason

    reasons = sorted({unvalidated_reason(r.get("base_model")) for r in records if r["task"] == task} - {""})
    return reasons[0] if reasons else ""


def apply_requirements(parts: list[Part]) -> list[Part]:
    """Each part of a claim that ``requires`` another (`Claim.requires`) counts only on a task where the required claim
    was judged **reproduced**: in the part's own setting where the required claim was judged there (a setting on
    another base), else in any setting of the page (a setting that shares the base of the one that judged it);
    elsewhere the part stays on the page, with its interval, as ``excluded``, and its claim's verdict does not read
    it."""
    verdicts: dict[tuple[str, str], dict[str, str]] = {}
    for p in parts:
        if p.judgement is not None:
            verdicts.setdefault((p.claim.name, p.task), {})[p.setting.name] = p.judgement.verdict
    gated = []
    for p in parts:
        required = p.claim.requires
        judged = verdicts.get((required, p.task), {})
        holds = judged[p.setting.name] == "reproduced" if p.setting.name in judged else "reproduced" in judged.values()
        if required and not holds:
            p = dataclasses.replace(p, excluded=f"claim {required.split(' ', 1)[0].rstrip('.')} not reproduced on")
        gated.append(p)
    return gated


def claims_table(parts: list[Part]) -> str:
    """Each claim on each task and setting: the paired effect (signed so that the claimed direction is positive), its
    95 % interval, the minimum detectable effect, the effect to exclude and the verdict the rule gave."""
    header = [
        "claim",
        "where (seeds × problems)",
        "arm − baseline, metric",
        "effect [95 % interval]",
        "crossed bootstrap / crossed t (ν)",
        "MDE",
        "power at the paper's effect",
        "effect to exclude",
        "verdict",
    ]
    rows = []
    for p in parts:
        c, j = p.claim, p.judgement
        exclude = c.to_exclude
        name = c.name + (f" *(exploratory: {exploratory_label(p.exploratory)})*" if p.exploratory else "")
        # the setting as code: a long name may then break inside its cell (docs/stylesheets/extra.css)
        where = f"{p.task}, `{p.setting.name}`" + (f" ({j.num_seeds} × {j.num_problems})" if j else "")
        cells = [name, where, f"{c.arm} − {p.baseline}, {c.metric}"]
        if j is None:
            cells += ["-", "-", "-", "-", exclude, f"not judged: {p.not_judged}"]
        elif j.no_test == IDENTICAL:
            cells += [
                "+0.000 (the arms are identical on every seed and problem)",
                "-",
                "-",
                "-",
                exclude,
                "**no test**",
            ]
        else:
            cells += [
                f"{signed(j.effect)} {interval(j)}",
                (
                    f"[{signed(j.bootstrap_low)}, {signed(j.bootstrap_high)}] / "
                    f"[{signed(j.t_low)}, {signed(j.t_high)}] ({j.degrees_of_freedom:.1f})"
                ),
                f"{j.minimum_detectable_effect:.3f}",
                power_text(j),
                exclude,
                verdict_text(j) + (f" (not counted: {p.excluded} this task)" if p.excluded else ""),
            ]
        rows.append(cells)
    lines = table(header, rows)
    lines += [
        "",
        (
            "Effects are signed so that the claimed direction is positive (for a claim that the arm is lower, a "
            "positive effect means it is lower). 'stated': a smallest effect of interest, where the paper gives none."
            + (
                " 'margin': a non-inferiority claim (the arm matches the baseline), reproduced if the interval "
                "excludes a loss of the margin or more, not reproduced if it lies wholly below it."
                if any(p.claim.margin is not None for p in parts)
                else ""
            )
        ),
    ]
    dropped = {p.task: p.near_duplicates for p in parts if p.near_duplicates}
    if dropped:
        counts = ", ".join(f"{task} {n}" for task, n in dropped.items())
        lines += [
            "",
            (
                "Held-out problems that are a reordering of a train problem (near duplicates: the same multiset of "
                "signed terms or of numbers, `trl_rlvr_ext.tasks.reasoning_gym.near_duplicate_key`) are left out of "
                f"every comparison, so the problems column counts the rest; left out: {counts} (see Held-out "
                "composition). The Pass@k tables average over every evaluated problem."
            ),
        ]
    notes = {}
    for p in parts:
        notes.setdefault(p.claim.name, p.claim)
    lines += ["", "Where each effect to exclude comes from:", ""]
    for claim in notes.values():
        lines.append(
            f"- *{claim.name}*: {claim.reason}."
            + (f" Exploratory, {claim.exploratory}." if claim.exploratory else "")
            + (f" Counted only on a task where *{claim.requires}* is reproduced." if claim.requires else "")
            + (
                f" Judged only where its mechanism acts: {claim.mechanism.label} at least {claim.mechanism.minimum:g} "
                f"in the arm and its baseline ({claim.mechanism.reason})."
                if claim.mechanism
                else ""
            )
        )
    for s in {p.setting.name: p.setting for p in parts}.values():  # chosen after looking, or its task on its problems
        lines += [
            f"- Setting `{s.name}` ({s.label}) is exploratory, {r}." for r in (s.exploratory, s.selected_on_test) if r
        ]
    for setting in {p.setting.name: p.setting for p in parts if p.setting.exploratory_tasks}.values():
        for task, reason in setting.exploratory_tasks.items():
            lines.append(f"- Setting `{setting.name}` ({setting.label}) is exploratory on {task}, {reason}.")
    for reason, tasks in _group_tasks((p.base_exploratory, p.task) for p in parts if p.base_exploratory).items():
        lines.append(
            f"- On {', '.join(tasks)} the comparisons that read the base's own test results are exploratory, {reason} "
            "(the base's choice read only its own pass rates: comparisons between two trained arms never entered "
            "it, and count)."
        )
    lines += [
        "",
        (
            f"The rule (`lab/studies/verdicts.py`): **reproduced** if the interval excludes 0 in the claimed "
            f"direction, **reversed** if it excludes 0 on the other side (a kind of not reproduced), **not reproduced** "
            "if it excludes the effect to exclude, else **inconclusive**. The interval is "
            "the hull of two 95 % intervals of the per-problem paired difference (same seeds, same problems), both "
            f"shown. Every seed runs on the same problems, so the design is crossed: a crossed bootstrap "
            f"({NUM_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}; the seeds with replacement and one problem draw, with "
            "replacement, shared by every drawn seed) and a crossed t interval (the grand mean's variance from the "
            "two-way ANOVA mean squares, (MS_seed + MS_problem − MS_residual) / (seeds × problems), with Satterthwaite's "
            "degrees of freedom ν). With 3-5 seeds the bootstrap alone is too narrow at the seed level (3 seeds have 10 "
            "distinct resamples), which the t quantile at ν corrects: a verdict must hold under both. **no test**: the "
            "arms are identical on every seed and problem (e.g. both at pass = 1 everywhere), so nothing is judged; "
            f"also where the baseline sits at the claimed bound on at least {100 * HEADROOM_SHARE:.0f} % of the seed × "
            "problem cells (no headroom; an interval that excludes 0 stays reproduced), or where a claim's mechanism "
            "gate fails (below the table). MDE: the effect this design detects with 80 % power, (t_{0.975, ν} + "
            "t_{0.8, ν}) × the larger of the two standard errors. Power at the paper's effect δ, from the same standard "
            "error se and ν: T_ν(|δ|/se − t_{0.975, ν}) + T_ν(−|δ|/se − t_{0.975, ν}); where the claim declares no paper "
            'effect, the power at its stated effect, marked "(stated effect)"; for a margin m, T_ν(m/se − '
            "t_{0.975, ν}) with the arms equal. **underpowered** beside a verdict that did not find the effect, below "
            f"{100 * UNDERPOWERED:.0f} %."
        ),
    ]
    return "\n".join(lines)


def power_text(j: Judgement) -> str:
    """A part's power at the paper's effect (`verdicts.power_at`), or, where the claim declares none, at its stated
    smallest effect (marked "(stated effect)")."""
    power = f"{100 * j.power:.0f} %" if j.power == j.power else "-"
    if j.claim.paper_effect is not None:
        return power
    # short: the claims table is at its page's width; the note under it says what "stated" means
    return f"{power} (stated effect)" if j.claim.margin is None else f"{power} (margin, arms equal)"


def verdict_text(j: Judgement) -> str:
    """A part's verdict in bold, with what the design could see beside it: why it is no test, "underpowered" (power at
    the paper's effect under `verdicts.UNDERPOWERED`), or a non-inferiority arm measurably below its baseline."""
    text = f"**{j.verdict}**"
    if j.verdict == NO_TEST and j.no_test != IDENTICAL:
        text += f" ({j.no_test})"
    elif j.underpowered:
        text += " (underpowered)"
    if j.measurably_below and j.verdict != NO_TEST:
        text += " (measurably below: the interval excludes 0 below)"
    return text


def _group_tasks(pairs) -> dict[str, list[str]]:
    """``(reason, task)`` pairs as reason -> its tasks, in order of first appearance."""
    grouped: dict[str, list[str]] = {}
    for reason, task in pairs:
        if task not in grouped.setdefault(reason, []):
            grouped[reason].append(task)
    return grouped


def exploratory_label(reason: str) -> str:
    """The short label of an exploratory reason (the text before its first ': '); of several (one a line), theirs."""
    return ", ".join(line.split(": ", 1)[0] for line in reason.splitlines())
