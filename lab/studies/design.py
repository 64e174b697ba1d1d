"""A study's design: its tasks (`StudyTask`), arms (`Arm`), sizes (`StudySizes`, `QUICK`), settings (`Setting`), extra
table columns (`Column`, `log_column`) and the `Study` that holds them. Pure declarations: nothing here runs a model,
so every study package and the run loop (`lab.studies.runner`) import it from below.
"""

import dataclasses
import math
import statistics
from collections.abc import Callable
from pathlib import Path


@dataclasses.dataclass
class StudyTask:
    """A task of a study.

    Args:
        name: short name (a directory name).
        dataset: a dataset name `trl_rlvr_ext.data` resolves, with ``train`` and ``test`` splits.
        reward: a reward name of `trl_rlvr_ext.rewards.get_reward_func`.
        base_model: ``base_model(quick) -> path`` of the model every arm starts from (built and cached on first use).
        gold_completion: ``gold_completion(row) -> str``, a correct completion of a dataset row (the probes).
        max_completion_length: generation budget (training and evaluation).
        selector: what ``--tasks`` says to select the task when that is not its name (a dataset name, with the
            flags it needs: `lab.studies.user_tasks`); its runs' rerun commands use it.
        temperature: the sampling temperature of training and of the final evaluation. 1 (the default) samples the
            policy's own distribution; a pretrained chat model whose task was screened at a lower temperature (the
            real model's, `docs/evidence/screening.md`) is studied at that one.
        settings: the study's settings the task belongs to (empty: every one, and the defaults). Like
            `Arm.settings`: a task declared for some settings only is left out of the default tasks elsewhere, so that
            adding it leaves the tasks an older command runs unchanged, and naming it there fails.
    """

    name: str
    dataset: str
    reward: str
    base_model: Callable[[bool], str]
    gold_completion: Callable[[dict], str]
    max_completion_length: int
    selector: str = ""
    temperature: float = 1.0
    settings: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"Task {self.name!r}: temperature={self.temperature} must be positive.")


@dataclasses.dataclass(frozen=True)
class Extrapolation:
    """An arm that trains nothing: RELEX (`trl_rlvr_ext.extrapolation`) fits the trajectory that ``source``'s
    same-seed run recorded (an arm with ``relex_record_steps`` in its config) over its first ``history_steps`` steps,
    and the arm is the checkpoint it extrapolates to ``target_step``, at subspace rank ``rank`` (paper: 1)."""

    source: str
    history_steps: int
    target_step: int
    rank: int = 1

    def __post_init__(self):
        for name in ("history_steps", "target_step", "rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Extrapolation {name} must be an integer >= 1, got {value!r}.")
        if self.history_steps < 2:
            raise ValueError(f"RELEX fits a line through the history: history_steps={self.history_steps} needs >= 2.")


@dataclasses.dataclass
class Arm:
    """An arm: ``train=False`` evaluates the base model; else GRPO with ``config`` overriding the study's settings.

    ``peft`` (keyword arguments of `peft.LoraConfig`) trains a LoRA adapter instead of every weight; ``config`` then
    names its initialiser (``lora_init``). A study with its own ``run_one`` reads ``config`` its own way.

    ``same_updates_as`` names an arm whose same-seed run (finished first, in the same ``out_dir``) sets this arm's
    ``max_steps``: the optimizer updates that run made. A curation arm that skips steps trains less than its baseline;
    this arm is the baseline at the same budget. ``same_prompts_as`` is the same for the prompts trained on
    (`prompts_trained`): a curation arm that drops prompts from every batch but makes every update trains on fewer
    prompts than its baseline, which the same updates do not match.

    ``extrapolate`` makes the arm an extrapolated checkpoint of another arm's trajectory (`Extrapolation`): it trains
    nothing (``train=False``) and is evaluated like any run.

    ``settings`` names the study's settings the arm belongs to (empty: every one, and the defaults). An arm declared
    for some settings only needs what those settings provide (e.g. a validation split); it is left out of the default
    arms elsewhere, so that adding it leaves the arms an older command runs unchanged, and naming it there fails.
    """

    name: str
    train: bool = True
    config: dict = dataclasses.field(default_factory=dict)
    peft: dict | None = None
    same_updates_as: str = ""  # another arm: train for the optimizer updates its same-seed run made (`updates_made`)
    same_prompts_as: str = ""  # another arm: train on as many prompts as its same-seed run did (`prompts_trained`)
    settings: tuple[str, ...] = ()  # the settings this arm runs in (empty: all, and without a setting)
    extrapolate: Extrapolation | None = None  # RELEX: the checkpoint extrapolated from another arm's trajectory

    def __post_init__(self):
        if self.same_updates_as and self.same_prompts_as:
            raise ValueError(
                f"Arm {self.name!r} sets same_updates_as and same_prompts_as: an arm matches one budget, set one."
            )
        if self.extrapolate is not None and (self.train or self.same_updates_as or self.same_prompts_as):
            raise ValueError(
                f"Arm {self.name!r} is extrapolated from {self.extrapolate.source!r}'s trajectory: it trains nothing. "
                "Set train=False and no budget (same_updates_as / same_prompts_as)."
            )

    @property
    def depends_on(self) -> str:
        """The arm whose same-seed run must finish before this one starts (its budget or its trajectory), or ''."""
        return self.same_updates_as or self.same_prompts_as or (self.extrapolate.source if self.extrapolate else "")


@dataclasses.dataclass
class StudySizes:
    """The sizes of a study (the defaults: a modest CPU study; `QUICK`: a smoke run whose numbers mean nothing)."""

    max_steps: int = 200
    learning_rate: float = 5e-5
    num_prompts: int = 32  # prompts per generation batch
    num_generations: int = 8
    steps_per_generation: int = 2
    eval_problems: int = 100
    eval_samples: int = 256
    probe_problems: int = 100
    probe_every: int = 20

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"{field.name}={getattr(self, field.name)} must be positive.")
        if (self.num_prompts * self.num_generations) % self.steps_per_generation:
            raise ValueError("num_prompts * num_generations must be a multiple of steps_per_generation.")


QUICK = StudySizes(
    max_steps=2,
    num_prompts=4,
    num_generations=2,
    steps_per_generation=1,
    eval_problems=3,
    eval_samples=4,
    probe_problems=3,
    probe_every=1,
)


EVALUATE_PRECISIONS = ("trainer", "fp32")

# The decomposition each LoRA initialiser used in every recorded study run: the package's defaults until 2026-12-06,
# when the defaults became the authors' exact SVD (`solver="full"`). The studies' arms pin these, so that a rerun of a
# declared design runs what its records ran (`lora_init_kwargs={"solver": ...}`).
RECORDED_LORA_SOLVERS = {"rlpo": "randomized", "rlmo": "gram", "pissa": "full", "milora": "gram"}


@dataclasses.dataclass(frozen=True)
class Setting:
    """A named regime of a study, declared in its code before its runs (``python -m lab study <name> --setting``).

    ``sizes`` overrides the study's default `StudySizes` fields; ``config`` is merged over every training arm's
    ``config`` (after it, so the setting decides, e.g. ``num_iterations``). A result records its setting's name, and
    its rerun command names it.
    """

    description: str
    sizes: dict = dataclasses.field(default_factory=dict)
    config: dict = dataclasses.field(default_factory=dict)
    # "validation": every run's final Pass@k (and its probes) is measured on the validation problems
    # (`validation_split`) instead of the test problems, for a setting whose runs make a choice (e.g. a learning rate)
    # that the test problems must not see. The record says which problems it measured (``evaluated_on``).
    evaluate_on: str = "test"
    # How a trained arm's final Pass@k is computed. "trainer": through the trainer's model as it trained, which under
    # TRL's default bf16=True on CPU is bf16 autocast around fp32 weights (every design before this field). "fp32": the
    # same weights with the trainer's autocast removed (`Accelerator.unwrap_model(keep_fp32_wrapper=False)`), which is
    # how a base arm (loaded fresh) is evaluated, so every arm of a design is measured at one precision. The record
    # says which (``evaluated_precision``).
    evaluate_precision: str = "trainer"
    # Warm-start settings of the task's base that this setting overrides (e.g. ``{"num_steps": 200, "seed": 100}``):
    # every arm starts from the base built with them, for a setting that chooses how a base is warm-started (the
    # ``self`` study's ``base_steps<N>`` calibration). Only a task whose base the package warm-starts takes them
    # (`StudyTask.base_model` with keyword arguments); the record keeps them (``base_overrides``).
    base: dict = dataclasses.field(default_factory=dict)
    # The tasks the setting is declared for (empty: every task): a setting whose ``base`` is one task's (its
    # calibrated warm start) must not run on another.
    tasks: tuple[str, ...] = ()

    def __post_init__(self):
        unknown = sorted(set(self.sizes) - {f.name for f in dataclasses.fields(StudySizes)})
        if unknown:
            raise ValueError(f"Setting sizes {unknown} are not StudySizes fields.")
        if self.evaluate_on not in ("test", "validation"):
            raise ValueError(f'evaluate_on={self.evaluate_on!r}: choose "test" or "validation".')
        if self.evaluate_precision not in EVALUATE_PRECISIONS:
            raise ValueError(
                f'evaluate_precision={self.evaluate_precision!r}: choose one of {EVALUATE_PRECISIONS} ("fp32" '
                "evaluates trained arms as base arms are)."
            )


@dataclasses.dataclass
class Column:
    """An extra column of a study's table: ``value(result) -> float | None`` per run, shown as mean ± sd over seeds."""

    header: str
    value: Callable[[dict], float | None]
    digits: int = 3


def train_log_series(result: dict, key: str) -> list[tuple[int, float]]:
    """``(step, value)`` of every training log entry of a run that has ``key``."""
    return [(entry["step"], entry[key]) for entry in result.get("train_log", []) if key in entry]


def log_column(header: str, key: str, reduce: str = "mean", digits: int = 3) -> Column:
    """A column reducing one training metric over the logged steps: ``"mean"``, ``"max"``, ``"min"`` or ``"last"``."""
    reducers = {"mean": statistics.fmean, "max": max, "min": min, "last": lambda values: values[-1]}
    if reduce not in reducers:
        raise ValueError(f"reduce={reduce!r}: choose one of {sorted(reducers)}.")

    def value(result: dict) -> float | None:
        values = [v for _, v in train_log_series(result, key) if v is not None and not math.isnan(v)]
        return reducers[reduce](values) if values else None

    return Column(header, value, digits)


@dataclasses.dataclass
class Study:
    """A named study: the claim it tests, its tasks and its arms.

    Optional parts, for studies that need more than the GRPO default:
    - ``columns``: extra table columns (`Column`, `log_column`);
    - ``curves``: training-log keys plotted over steps per arm (``<task>_training.png``);
    - ``sizes`` / ``quick_sizes``: the study's own defaults (else `StudySizes()` / `QUICK`);
    - ``run_one``: runs one (task, arm, seed) instead of `run_one` (same signature; must write the same
      ``result.json`` keys that the table reads: ``pass_at_k``, ``boundary``, ``train_seconds``, ``wall_seconds``...);
    - ``plots``: ``plot(task_name, rows, out_dir) -> list of markdown lines`` for study-specific figures;
    - ``arm_sets``: names usable in ``arms`` that stand for arms picked from the runs already in ``out_dir``
      (``arm_set(out_dir, task) -> arm names``; e.g. the ``lora_init`` study's ``chosen``: each method at its best
      swept learning rate);
    - ``settings``: named regimes (`Setting`) a run can be started in (``--setting``); without one, the defaults.
    - ``claims``: the pre-declared comparisons (`lab.studies.verdicts.Claim`) that the evidence page judges
      with the verdict rule (``python -m lab study report <name>``).
    """

    name: str
    claim: str
    tasks: dict[str, StudyTask]
    arms: dict[str, Arm]
    columns: list[Column] = dataclasses.field(default_factory=list)
    curves: list[str] = dataclasses.field(default_factory=list)
    sizes: StudySizes | None = None
    quick_sizes: StudySizes | None = None
    run_one: Callable | None = None
    plots: list[Callable] = dataclasses.field(default_factory=list)
    arm_sets: dict[str, Callable[[Path, str], list[str]]] = dataclasses.field(default_factory=dict)
    settings: dict[str, Setting] = dataclasses.field(default_factory=dict)
    claims: list = dataclasses.field(default_factory=list)

    def default_sizes(self, quick: bool, setting: str | None = None) -> StudySizes:
        """The sizes a run starts from: the study's own (or its quick ones), with ``setting``'s sizes over them (a
        quick run keeps the setting's reuse pattern only where its small batch allows it)."""
        sizes = (self.quick_sizes or QUICK) if quick else (self.sizes or StudySizes())
        if setting is None:
            return sizes
        overrides = self.get_setting(setting).sizes
        if quick:  # the smoke sizes stay small: only the reuse pattern (steps per generation) follows the setting
            overrides = {k: v for k, v in overrides.items() if k == "steps_per_generation"}
        return dataclasses.replace(sizes, **overrides)

    def get_setting(self, name: str) -> Setting:
        if name not in self.settings:
            known = sorted(self.settings) or "none: this study has no settings"
            raise ValueError(f"Unknown setting {name!r} for study {self.name!r}: choose from {known}.")
        return self.settings[name]

    def default_tasks(self, setting: str | None) -> list[str]:
        """The tasks a run in ``setting`` (``None``: the defaults) runs when none are named: every task that belongs to
        it (`StudyTask.settings`), or the tasks the setting is declared for (`Setting.tasks`)."""
        if setting is not None and self.get_setting(setting).tasks:
            return list(self.get_setting(setting).tasks)
        return [name for name, task in self.tasks.items() if not task.settings or setting in task.settings]

    def default_arms(self, setting: str | None) -> list[str]:
        """The arms a run in ``setting`` (``None``: the defaults) runs when none are named: every arm that belongs to
        it (`Arm.settings`)."""
        return [name for name, arm in self.arms.items() if not arm.settings or setting in arm.settings]

    def arm_in_setting(self, arm: "Arm", setting: str | None) -> "Arm":
        """``arm`` with ``setting``'s config merged over its own (an untrained arm is left as it is)."""
        if setting is None or not arm.train:
            return arm
        return dataclasses.replace(arm, config={**arm.config, **self.get_setting(setting).config})
