"""How long the reasoning-gym bases are warm-started, chosen on validation problems by a declared rule.

Why: the warm-start steps of the chain_sum, number_sorting and mixture bases (`self_study.GYM_BASE_STEPS`) were first
picked by looking at the base's pass rates on the held-out problems that the studies report. A choice must not touch
the test problems, nor a reported seed. This module declares the calibration that replaces that look, before any of
its runs:

- **Candidates.** A doubling ladder around each task's steps in use (`ladder`: the steps × 2^i, i = -3..3). The first
  grid is the steps in use and their two neighbours (`first_grid`).
- **Runs.** Each candidate is the ``base`` arm of the ``self`` study in the setting ``base_steps<N>`` (`SETTINGS`): the
  task's base warm-started ``N`` steps with warm-start seed `SEED` (the bases of the studies use seed 0), evaluated on
  the validation problems (held-out rows 100-199, never the test problems) with `SAMPLES` samples each, as every base
  arm is evaluated (temperature 1, the task's generation budget), sampling seed ``1000 + SEED``. `SEED` is never
  reported. `COMMANDS` runs the first grid.
- **The rule** (`choose`): the candidate with the widest spread of per-problem pass rates, the share of validation
  problems solved by more than 10 % and fewer than 90 % of the samples (`trl_rlvr_ext.gym_bases.
  pass_rate_spread`: the problems that give GRPO a group with both rewards, what the bases were built for); a tie
  goes to fewer steps. A best candidate at an edge of the grid run so far asks for its next ladder step beyond that
  edge (`next_run`), until the best is inside the grid. Only the records decide; the test problems are never read.

`choose` reads the committed records (``docs/evidence/data/base_steps.jsonl``); a test holds `CHOSEN` to its choice,
and the SELF page renders the calibration (`lab.studies.report`).

What the choice means for the records made before it: a base whose steps in use are not the rule's choice was chosen
on the test problems (`unvalidated_reason`). The choice read the base's own pass rates only, so it can bias the
comparisons that read the base's test results (the base arm against a trained arm or a trivial policy); a comparison
between two arms trained from the same base never entered it. The report marks the former exploratory; the designs on
the base the rule chose confirm them (`validated_setting`).
"""

import dataclasses

from trl_rlvr_ext.gym_bases import pass_rate_spread

from .design import Setting


# The tasks whose bases' steps were picked on the test problems, with their steps at the time (the ladder's centre).
# countdown's 1000 steps were fixed before any build and countdown_compact's 3000 on its own train problems; the toy's
# bases follow the toy's designed misconception (docs/toy.md): none of them read a test problem.
STEPS_IN_USE = {"chain_sum": 400, "number_sorting": 400, "mixture": 1000}
# Their presets (`trl_rlvr_ext.gym_bases.PRESETS`) and the cache names of the bases in use (warm-start seed 0):
# the records name their base by this digest (a test holds it to the settings, so that a change of the reasoning-gym
# version, which changes every digest, fails loudly instead of unmarking the records).
PRESET_OF = {"chain_sum": "chain_sum", "number_sorting": "number_sorting", "mixture": "chain_sum+number_sorting"}
DIGEST_IN_USE = {"chain_sum": "4f40804cf128e431", "number_sorting": "3e2dc41395ce1b74", "mixture": "07d98083081e597e"}
SEED = 100  # the warm-start seed and (as 1000 + SEED) the sampling seed of every calibration run; never reported
SAMPLES = 64  # samples per validation problem: a pass rate within about ±0.06 (one sd) at 0.1 and 0.9
PREFIX = "base_steps"
LADDER_EXPONENTS = range(-3, 4)


def ladder(task: str) -> tuple[int, ...]:
    """The candidate steps of ``task``: its steps in use × 2^i, i = -3..3, ascending."""
    if task not in STEPS_IN_USE:
        raise ValueError(
            f"No base-steps calibration is declared for task {task!r}: choose from {sorted(STEPS_IN_USE)}."
        )
    return tuple(round(STEPS_IN_USE[task] * 2.0**i) for i in LADDER_EXPONENTS)


def first_grid(task: str) -> tuple[int, ...]:
    """The candidates run first: the steps in use and their two ladder neighbours."""
    steps = ladder(task)
    middle = steps.index(STEPS_IN_USE[task])
    return steps[middle - 1 : middle + 2]


def setting_name(steps: int) -> str:
    return f"{PREFIX}{steps}"


SETTINGS = {
    setting_name(steps): Setting(
        f"base calibration: the task's base warm-started {steps} steps with seed {SEED}, evaluated on the validation "
        "problems only",
        sizes={"eval_samples": SAMPLES},
        evaluate_on="validation",
        base={"num_steps": steps, "seed": SEED},
    )
    for steps in sorted({steps for task in STEPS_IN_USE for steps in ladder(task)})
}


def command(task: str, steps: int) -> str:
    """The command of one calibration run (its own ``--out_dir``: runs of two settings share task, arm and seed)."""
    return (
        f"trl-rlvr-ext study self --tasks {task} --arms base --seeds {SEED} --setting {setting_name(steps)} "
        f"--out_dir <dir>/{setting_name(steps)}"
    )


COMMANDS = tuple(command(task, steps) for task in STEPS_IN_USE for steps in first_grid(task))


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The rule on one task's records: the spread of each candidate run, the steps chosen (``None`` until the best
    candidate is inside the grid run) and the candidate to run next (``None`` once chosen)."""

    task: str
    spreads: dict[int, float]
    chosen: int | None
    next_run: int | None


def calibration_runs(records: list[dict], task: str) -> dict[int, dict]:
    """``task``'s calibration records by their warm-start steps (the ``base`` arm, seed `SEED`, a ``base_steps<N>``
    setting); two records of one candidate are refused, so that the rule reads each once."""
    runs = {}
    for record in records:
        setting = record.get("setting") or ""
        if (
            record["task"] != task
            or record["arm"] != "base"
            or record["seed"] != SEED
            or not setting.startswith(PREFIX)
        ):
            continue
        steps = int(setting[len(PREFIX) :])
        if record.get("base_overrides", {}).get("num_steps") != steps:
            raise ValueError(
                f"A {setting} record of {task} was warm-started {record.get('base_overrides')}: not {steps}."
            )
        if steps in runs:
            raise ValueError(f"Two calibration records of {task} at {steps} steps: keep one per candidate.")
        runs[steps] = record
    return runs


def choose(records: list[dict], task: str) -> Calibration:
    """The rule (see the module): the widest spread of pass rates on the validation problems, ties to fewer steps,
    a best candidate at an edge of the grid run so far extended past it along the `ladder`."""
    steps = ladder(task)
    runs = calibration_runs(records, task)
    unknown = sorted(set(runs) - set(steps))
    if unknown:
        raise ValueError(f"Calibration records of {task} at {unknown} steps are not on its ladder {steps}.")
    spreads = {n: pass_rate_spread(runs[n]["num_correct"], runs[n]["num_samples"])["mid"] for n in sorted(runs)}
    missing = [n for n in first_grid(task) if n not in runs]
    if missing:
        return Calibration(task, spreads, None, missing[0])
    widest = max(spreads.values())
    best = min(n for n, spread in spreads.items() if spread == widest)
    position = steps.index(best)
    for edge, beyond in ((min(runs), position - 1), (max(runs), position + 1)):
        if best == edge:
            if not 0 <= beyond < len(steps):
                raise ValueError(
                    f"The best candidate of {task} ({best} steps) is at the end of its ladder {steps}: the ladder must "
                    "be extended (a declared change) before a choice can be made."
                )
            if steps[beyond] not in runs:
                return Calibration(task, spreads, None, steps[beyond])
    return Calibration(task, spreads, best, None)


# The rule's choice on the committed records (docs/evidence/data/base_steps.jsonl; a test holds the two equal). On
# chain_sum and the mixture it is the steps in use; number_sorting's base in use (400 steps, seed 0) is not the choice:
# at 400 steps the calibration's seed barely solves a validation problem, so the seed-0 base in use sits past a sharp
# transition that the warm-start seed moves.
CHOSEN = {"chain_sum": 400, "number_sorting": 800, "mixture": 1000}
# The tasks whose base in use is not the rule's choice: the studies declare a setting per task
# (`validated_setting`) that reruns a design on the base the rule chose, before its runs.
VALIDATED_TASKS = tuple(task for task in STEPS_IN_USE if CHOSEN[task] != STEPS_IN_USE[task])


def validated_setting(task: str) -> str:
    """The name of the settings that run ``task`` on the base the rule chose."""
    return f"validated_{task}"


def validated_base(task: str) -> dict:
    """The warm-start settings (`lab.studies.runner.Setting.base`) of ``task``'s base at the rule's choice."""
    return {"num_steps": CHOSEN[task]}


def unvalidated_reason(base_model: str | None) -> str:
    """Why a record's base was chosen on the test problems ("base chosen on the test set: ..."), from its path's
    digest; empty for any other base (one the rule chose, the toy's, a calibration base)."""
    digest = str(base_model or "").rstrip("/").rsplit("/", 1)[-1]
    for task, in_use in DIGEST_IN_USE.items():
        if digest == in_use and CHOSEN[task] != STEPS_IN_USE[task]:
            return (
                f"base chosen on the test set: {task}'s base was warm-started {STEPS_IN_USE[task]} steps, picked on "
                f"the test problems' pass rates; the calibration on validation problems chooses {CHOSEN[task]}"
            )
    return ""
