"""The engine of the evidence pages (`lab.studies.report` renders them): what a page is (`Page`, its
settings `PageSetting`, the method pages that summarise it `MethodSummary`), the records a setting reads, and the tables
every page shows (Pass@k, seeds, commands, the held-out splits). A study's own page (its settings, columns and blocks)
is declared in its package's ``pages`` module; nothing here names a study.
"""

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trl_rlvr_ext.evaluation.estimators import pass_at_k

from .design import Column
from .markdown import mean_sd, row, table
from .records import end_probe, read_records_text
from .verdicts import Claim


# Shown k's of the Pass@k tables (those up to the records' samples per problem).
KS = (1, 4, 16, 64, 256)


# Resamples and seed of every interval: fixed, so that a page renders to the same bytes every time.
NUM_RESAMPLES = 10_000


BOOTSTRAP_SEED = 0


TRIVIAL_RECORDS = "docs/evidence/data/trivial.jsonl"


TRIVIAL_PREFIX = "trivial"


@dataclasses.dataclass(frozen=True)
class PageSetting:
    """One setting of a study's page: the records files it reads and the sizes its trained runs share (``match``:
    `StudySizes` field -> value). Untrained arms (the base, trivial policies) do not depend on the training sizes and
    belong to every setting (a record whose sizes match is preferred)."""

    name: str
    label: str
    records: tuple[str, ...]
    match: dict = dataclasses.field(default_factory=dict)
    exploratory: str = ""  # why the setting was chosen after looking ("<short label>: <details>"); empty: pre-declared
    # task -> why the setting is exploratory on that task only (it was chosen looking at that task's runs; on the
    # other tasks it was declared before their runs)
    exploratory_tasks: dict = dataclasses.field(default_factory=dict)
    # why a choice behind the setting (its task, its answer format) read the very problems its claims are judged on
    # ("<short label>: <details>"), declared by its design; empty: none did. Its parts are exploratory, and a page
    # sentence saying that no choice read them fails the prose check (`prose.false_selection_sentences`)
    selected_on_test: str = ""
    # the seeds the design declared (empty: every seed that ran). A claim is judged on exactly these, and only once
    # both its arms have run all of them: a design that has not finished shows how far it got, not an interim
    # verdict (which would invite stopping when it looks good)
    seeds: tuple[int, ...] = ()

    def matches(self, record: dict) -> bool:
        """Whether the record's sizes are this setting's (``match``); a record without sizes matches no constraint."""
        return all((record.get("sizes") or {}).get(k) == v for k, v in self.match.items())


@dataclasses.dataclass(frozen=True)
class MethodSummary:
    """A method page's evidence summary: the claims of ``study`` that ``select`` keeps, with their verdicts."""

    path: str
    study: str
    select: Callable[[Claim], bool] = lambda claim: True


@dataclasses.dataclass(frozen=True)
class Page:
    """An evidence page: its study, its markdown file, its settings and any columns of its own (``columns``, after the
    study's) and blocks of its own, per task and setting (``extra_blocks(page, setting, task, records) -> {block
    suffix: markdown}``) and per page (``page_blocks(page, {setting name: records}, root) -> {block suffix:
    markdown}``)."""

    study: str
    path: str
    settings: tuple[PageSetting, ...]
    label: str
    columns: tuple[Column, ...] = ()
    extra_blocks: Callable | None = None
    page_blocks: Callable | None = None  # page_blocks(page, {setting: records}, root) -> {block suffix: markdown}
    # the method pages that summarise this page's claims
    method_summaries: tuple[MethodSummary, ...] = ()
    # the verdicts the page gave before the rule (by claim, or by the claim its parts belong to): the index shows what
    # changed
    previous_verdicts: dict = dataclasses.field(default_factory=dict)
    # the method a claim is about, by its arm, where it is not the page's own (``label``)
    method_of_arm: dict = dataclasses.field(default_factory=dict)
    # the method a claim is about, by the claim's name, where its arm does not say it: a claim about a method's
    # premise compares two arms that are not the method's (SELF's "GRPO lowers pass@k below the base")
    method_of_claim: dict = dataclasses.field(default_factory=dict)
    # the pages below the page (per setting and task tables, held-out composition): paths of ``docs/evidence/``; each
    # of the study's rendered blocks is placed in exactly one of the page and these (`markdown.fill_pages`)
    details: tuple[str, ...] = ()
    # the held-out composition as one block per task (``<study>:splits:<task>``), so that the tasks can sit on
    # different detail pages (a page stays under its size limit, tests/test_evidence_sizes.py)
    splits_by_task: bool = False
    # the page's short title, for the index and the method pages' evidence boxes ("NSR where the clip binds")
    title: str = ""


def first_logged(key: str) -> Callable[[dict], float | None]:
    def value(record: dict) -> float | None:
        values = [e[key] for e in record.get("train_log", []) if key in e]
        return values[0] if values else None

    return value


def last_logged(key: str) -> Callable[[dict], float | None]:
    def value(record: dict) -> float | None:
        values = [e[key] for e in record.get("train_log", []) if key in e]
        return values[-1] if values else None

    return value


def reward_ratio(last: Callable[[dict], float | None]) -> Callable[[dict], float | None]:
    """``last(record)`` over the first logged training reward: the quantity a collapse rule compares with 0.5."""

    def value(record: dict) -> float | None:
        first = first_logged("reward")(record)
        end = last(record)
        return None if not first or end is None else end / first

    return value


# The NSR collapse rule's quantity: the last logged training reward over the first.
last_over_first_reward = reward_ratio(last_logged("reward"))


def load_records(path: str | Path) -> list[dict]:
    """The records of a JSONL file (one run per line); ``num_correct`` as a list of ints (it may be stored as a JSON
    string of the list)."""
    records = []
    for number, line in enumerate(read_records_text(path).splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if isinstance(record.get("num_correct"), str):
            record["num_correct"] = json.loads(record["num_correct"])
        for key in ("task", "arm", "seed", "num_correct", "num_samples"):
            if key not in record:
                raise ValueError(f"{path}:{number}: a record needs {key!r} (see lab.studies.runner).")
        records.append(record)
    return records


def per_problem(record: dict, k: int) -> np.ndarray | None:
    """Each problem's unbiased pass@k of a run (``None`` when the run drew fewer than ``k`` samples per problem)."""
    if k > record["num_samples"]:
        return None
    return pass_at_k(record["num_samples"], np.asarray(record["num_correct"]), k)


def is_untrained(study, arm: str) -> bool:
    return arm.startswith(TRIVIAL_PREFIX) or (arm in study.arms and not study.arms[arm].train)


def evaluates(record: dict, study_name: str) -> bool:
    """Whether a trivial-policy record was graded on ``study_name``'s evaluation problems (its ``evaluates.studies``;
    a record without it is taken for every study, and pairs only where its problems and samples fit)."""
    studies = (record.get("evaluates") or {}).get("studies")
    return studies is None or study_name in studies


def evaluation_rows(record: dict) -> tuple[int, int]:
    """The held-out rows ``[start, stop)`` a record's Pass@k measured: ``evaluated_on`` where the run says (a
    validation setting, `lab.studies.runner.Setting.evaluate_on`), else the first ``len(num_correct)``."""
    rows = (record.get("evaluated_on") or {}).get("rows")
    return tuple(rows) if rows else (0, len(record["num_correct"]))


def setting_records(study, setting: PageSetting, root: Path) -> list[dict]:
    """The runs of one setting: trained runs whose sizes match, and one record per (task, arm, seed) of the untrained
    arms (the base; trivial policies from `TRIVIAL_RECORDS`, when it exists), for the tasks the setting trained on."""
    records = [r for path in setting.records for r in load_records(root / path)]
    trivial = root / TRIVIAL_RECORDS
    records += [r for r in load_records(trivial) if evaluates(r, study.name)] if trivial.is_file() else []
    trained = [r for r in records if not is_untrained(study, r["arm"]) and setting.matches(r)]
    # an untrained arm's record belongs only where it measured the trained runs' problems (a validation sweep's base
    # is not the test problems' base, and the trivial policies were graded on the test problems)
    # a task whose setting ran only an untrained arm (a base evaluated for another study's task) is shown too, where
    # that arm's sizes are the setting's
    trained_tasks = {r["task"] for r in trained}
    anchors = trained + [
        r
        for r in records
        if r["task"] not in trained_tasks
        and is_untrained(study, r["arm"])
        and not r["arm"].startswith(TRIVIAL_PREFIX)
        and r.get("sizes")
        and setting.matches(r)
    ]
    measured = {(r["task"], evaluation_rows(r)) for r in anchors}
    untrained: dict[tuple, dict] = {}
    for r in records:
        if is_untrained(study, r["arm"]) and (r["task"], evaluation_rows(r)) in measured:
            key = (r["task"], r["arm"], r["seed"])
            matches = setting.matches(r)
            if key not in untrained or matches and not untrained[key][1]:
                untrained[key] = (r, matches)
    return trained + [r for r, _ in untrained.values()]


def arm_order(page: Page, records: list[dict]) -> list[str]:
    from .registry import get_study

    names = list(dict.fromkeys(r["arm"] for r in records))
    known = [a for a in get_study(page.study).arms if a in names]
    return (
        known
        + [a for a in names if a not in known and not a.startswith(TRIVIAL_PREFIX)]
        + sorted(a for a in names if a.startswith(TRIVIAL_PREFIX))
    )


def page_tasks(study, records: list[dict]) -> list[str]:
    names = {r["task"] for r in records}
    return [t for t in study.tasks if t in names] + sorted(names - set(study.tasks))


# Value columns per table beside the arm: wider tables overflow the docs' column (tests/test_docs_render.py).
COLUMNS_PER_TABLE = 5


def pass_at_k_table(study, page: Page, records: list[dict]) -> str:
    """Mean ± sd over seeds per arm: Pass@k (recomputed per problem from the counts); then, in tables of at most
    `COLUMNS_PER_TABLE` columns (the trained arms only), the probe metrics at the end of training, the study's and
    the page's columns, train and wall seconds."""
    num_samples = max(r["num_samples"] for r in records)
    ks = [k for k in KS if k <= num_samples]
    arms = arm_order(page, records)
    runs_of = {arm: sorted((r for r in records if r["arm"] == arm), key=lambda r: r["seed"]) for arm in arms}
    rows = []
    for arm, runs in runs_of.items():
        cells = [arm, ",".join(str(r["seed"]) for r in runs)]
        for k in ks:
            values = [per_problem(r, k) for r in runs]
            cells.append(mean_sd([float(v.mean()) for v in values if v is not None]))
        rows.append(cells)
    lines = table(["arm", "seeds", *[f"pass@{k}" for k in ks]], rows)

    extra: list[tuple[str, Callable[[list[dict]], str]]] = []
    if any(r.get("boundary") for r in records):
        for key in ("interference_frac", "winner_take_all"):
            extra.append(
                (
                    f"{key} (end)",
                    lambda runs, key=key: mean_sd(
                        [p.get(f"boundary/{key}") for r in runs if (p := end_probe(r)) is not None]
                    ),
                )
            )
    for column in [*study.columns, *page.columns]:  # training columns: "-" for an untrained arm
        extra.append(
            (
                column.header,
                lambda runs, c=column: (
                    "-" if is_untrained(study, runs[0]["arm"]) else mean_sd([c.value(r) for r in runs], c.digits)
                ),
            )
        )
    for key, header in (("train_seconds", "train s"), ("wall_seconds", "wall s")):
        extra.append((header, lambda runs, key=key: mean_sd([r.get(key) for r in runs], digits=0)))
    shown = [arm for arm in arms if not arm.startswith(TRIVIAL_PREFIX)]  # a trivial policy has no training
    for start in range(0, len(extra), COLUMNS_PER_TABLE):
        chunk = extra[start : start + COLUMNS_PER_TABLE]
        rows = [[arm, *(value(runs_of[arm]) for _, value in chunk)] for arm in shown]
        lines += ["", *table(["arm", *(header for header, _ in chunk)], rows)]
    return "\n".join(lines)


def seeds_table(page: Page, records: list[dict]) -> str:
    """Every run: pass@1 / pass@k at the largest shown k, per arm (rows) and seed (columns). A trivial policy's seed
    only seeds its guesses, which have nothing to do with a training seed of the same number, so its rows are left
    out beside trained or base runs (its mean ± sd over its seeds is in the Pass@k table); they are the table only
    where nothing else ran."""
    num_samples = max(r["num_samples"] for r in records)
    top = max(k for k in KS if k <= num_samples)
    models = [r for r in records if not r["arm"].startswith(TRIVIAL_PREFIX)]
    records = models or records
    seeds = sorted({r["seed"] for r in records})
    lines = [row(["arm", *[f"seed {s}: pass@1 / pass@{top}" for s in seeds]]), "|" + "---|" * (len(seeds) + 1)]
    for arm in arm_order(page, records):
        by_seed = {r["seed"]: r for r in records if r["arm"] == arm}
        cells = [arm]
        for seed in seeds:
            r = by_seed.get(seed)
            if r is None:
                cells.append("-")
                continue
            values = [per_problem(r, k) for k in (1, top)]
            cells.append(" / ".join("n/a" if v is None else f"{v.mean():.3f}" for v in values))
        lines.append(row(cells))
    return "\n".join(lines)


def commands_block(settings_records: dict[str, list[dict]]) -> str:
    """Per setting: every command that produced its runs (with the number of runs), and the wall time per task."""
    lines = []
    for setting, records in settings_records.items():
        if not records:  # a declared setting before its first run
            lines += [f"Setting `{setting}`: no runs yet.", ""]
            continue
        commands: dict[str, int] = {}
        for r in records:
            commands[r.get("command", "")] = commands.get(r.get("command", ""), 0) + 1
        lines += [f"Setting `{setting}`:", "", "```text"]
        lines += [f"{command}   # {n} run{'s' * (n > 1)}" for command, n in commands.items()]
        lines += ["```", "", "| task | runs | wall s per run (min – max) | wall minutes (sum) |", "|---|---|---|---|"]
        for task in dict.fromkeys(r["task"] for r in records):
            walls = [r["wall_seconds"] for r in records if r["task"] == task and r.get("wall_seconds") is not None]
            if walls:
                lines.append(
                    row([task, str(len(walls)), f"{min(walls):.0f} – {max(walls):.0f}", f"{sum(walls) / 60:.0f}"])
                )
        lines.append("")
    return "\n".join(lines).rstrip("\n")


@functools.cache
def _split_composition(dataset: str, eval_problems: int) -> dict:
    """`split_composition`, drawn once per dataset and evaluation size: the pages share the presets' tasks, and each
    draw generates the whole dataset. Read only."""
    from trl_rlvr_ext.tasks.reasoning_gym import split_composition

    return split_composition(dataset, eval_problems)


def splits_blocks(settings_records: dict[str, list[dict]]) -> dict[str, str]:
    """What each reasoning-gym task's splits hold (`composition_markdown`: strata per split, the problems the
    held-out draw dropped, the near duplicates left in the evaluated problems) and, for a task with several strata,
    Pass@k per stratum of every trained run of each setting (`stratum_table_markdown`); by task (a task evaluated
    on two datasets: both, in order), or the one note ``{"": ...}`` where no task is a reasoning-gym one."""
    from trl_rlvr_ext.tasks.reasoning_gym import composition_markdown

    from .strata import stratum_table_markdown

    datasets: dict[tuple[str, str, int], dict[str, list[dict]]] = {}
    for setting, records in settings_records.items():
        for r in records:
            # the test problems' composition; a validation setting's rows are the next ones of the same split
            if str(r.get("dataset", "")).startswith("reasoning_gym:") and evaluation_rows(r)[0] == 0:
                key = (r["task"], r["dataset"], len(r["num_correct"]))
                datasets.setdefault(key, {}).setdefault(setting, []).append(r)
    if not datasets:
        return {
            "": "No reasoning-gym task here: the toy's splits are a hash split of its problem space (docs/toy.md)."
        }
    blocks = {}
    for (task, dataset, eval_problems), by_setting in datasets.items():
        lines = [f"**{task}** (`{dataset}`, the first {eval_problems} held-out problems evaluated):", ""]
        composition = _split_composition(dataset, eval_problems)
        lines += [composition_markdown(composition).rstrip("\n"), ""]
        eval_strata = composition["eval_strata"]
        if len(set(eval_strata)) > 1:
            for setting, records in by_setting.items():
                lines += [f"Pass@k per stratum, setting `{setting}`:", ""]
                lines += [stratum_table_markdown(records, eval_strata).rstrip("\n"), ""]
        text = "\n".join(lines).rstrip("\n")  # a task evaluated on two datasets: both, in order
        blocks[task] = f"{blocks[task]}\n\n{text}" if task in blocks else text
    return blocks
