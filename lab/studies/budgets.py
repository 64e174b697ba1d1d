"""What a training run spent, read from its record (updates made, generation batches, prompts trained), and the arms
whose budget is matched to another arm's same-seed run (`same_budget_arm`).
"""

import dataclasses
from pathlib import Path

from .design import (
    Arm,
    StudySizes,
    StudyTask,
    train_log_series,
)
from .run_files import finished_result


def run_max_steps(result: dict) -> int:
    """The steps a run was set to take: its GRPO config's ``max_steps`` (an arm stopped at another run's budget sets
    its own), else the study's."""
    return (result.get("grpo_config") or {}).get("max_steps", result["sizes"]["max_steps"])


def updates_made(result: dict) -> int:
    """The optimizer updates a run made: its ``max_steps`` less the steps its curation skipped (the cumulative
    ``curation/skipped_steps`` of its last log entry; 0 without curation)."""
    skipped = [e["curation/skipped_steps"] for e in result.get("train_log", []) if "curation/skipped_steps" in e]
    return int(run_max_steps(result) - (skipped[-1] if skipped else 0))


def _steps_per_generation(result: dict) -> int:
    return (result.get("grpo_config") or {}).get("steps_per_generation", result["sizes"]["steps_per_generation"])


def generation_batches(result: dict) -> float:
    """The generation batches a run's steps cover: its ``max_steps`` (the run's own, else the study's) over
    ``steps_per_generation``."""
    return run_max_steps(result) / _steps_per_generation(result)


def prompts_trained(result: dict) -> float:
    """The prompts a run trained on, summed over its generation batches: each logging window's mean of
    ``curation/kept_prompts`` (logged once per scored batch, 0 for a batch dropped whole) times the batches the window
    holds (its steps over ``steps_per_generation``); a run without curation trains on every prompt of every batch."""
    per_generation = _steps_per_generation(result)
    kept = train_log_series(result, "curation/kept_prompts")
    if not kept:
        return float(result["sizes"]["num_prompts"] * generation_batches(result))
    total, previous = 0.0, 0
    for step, value in kept:
        total += value * (step - previous) / per_generation
        previous = step
    return total


def _budget_source(out_dir: Path, task: StudyTask, arm: Arm, source: str, seed: int, what: str) -> dict:
    done = finished_result(out_dir, task, Arm(source), seed)
    if done is None:
        raise ValueError(
            f"Arm {arm.name!r} trains for as many {what} as {source!r} did on seed {seed}, which has not run in "
            f"{out_dir}/{task.name}: run --arms {source} first (or list it before {arm.name})."
        )
    return done


def same_budget_arm(out_dir: Path, task: StudyTask, arm: Arm, seed: int, sizes: "StudySizes") -> tuple[Arm, dict]:
    """``arm`` with ``max_steps`` set to the budget of its source arm's same-seed run, and the budget record.

    ``same_updates_as``: the updates that run made (`updates_made`); record ``{"same_updates_as": name, "updates":
    n}``. ``same_prompts_as``: as many whole generation batches of ``sizes.num_prompts`` prompts as the prompts that
    run trained on (`prompts_trained`, rounded to the nearest batch, at least one), times ``steps_per_generation``;
    record ``{"same_prompts_as": name, "prompts": p, "updates": n}``. Fails naming the run to make first."""
    if arm.same_updates_as:
        updates = updates_made(_budget_source(out_dir, task, arm, arm.same_updates_as, seed, "updates"))
        if updates < 1:
            raise ValueError(f"{arm.same_updates_as!r} seed {seed} made no update: there is no budget to match.")
        budget = {"same_updates_as": arm.same_updates_as, "updates": updates}
    else:
        prompts = prompts_trained(_budget_source(out_dir, task, arm, arm.same_prompts_as, seed, "prompts"))
        if prompts <= 0:
            raise ValueError(f"{arm.same_prompts_as!r} seed {seed} trained on no prompt: there is no budget to match.")
        batches = max(1, round(prompts / sizes.num_prompts))
        updates = batches * sizes.steps_per_generation
        budget = {"same_prompts_as": arm.same_prompts_as, "prompts": round(prompts, 3), "updates": updates}
    return dataclasses.replace(arm, config={**arm.config, "max_steps": updates}), budget
