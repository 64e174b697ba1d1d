"""A run's files: ``<out_dir>/<task>/<arm>/seed<k>/result.json``, written last and atomically, so that a run is
finished exactly when its result exists and an interrupted study resumes where it stopped.
"""

import dataclasses
import json
from pathlib import Path

from .design import Arm, Study, StudySizes, StudyTask


# A run's result, and the pattern of every result under a study's output folder (`records.collect_results`).
RESULT = "result.json"
RESULTS_GLOB = f"*/*/seed*/{RESULT}"


def run_dir(out_dir: str | Path, task: str, arm: str, seed: int) -> Path:
    """A run's folder: ``<out_dir>/<task>/<arm>/seed<k>`` (the one place that spells it)."""
    return Path(out_dir) / task / arm / f"seed{seed}"


def result_path(out_dir: str | Path, task: str, arm: str, seed: int) -> Path:
    """A run's ``result.json``: it exists exactly when the run has finished."""
    return run_dir(out_dir, task, arm, seed) / RESULT


def finished_result(out_dir: Path, task: StudyTask, arm: Arm, seed: int) -> dict | None:
    """The ``result.json`` of a finished run, ``None`` if the run has not finished (the file is written last)."""
    path = result_path(out_dir, task.name, arm.name, seed)
    return json.loads(path.read_text()) if path.is_file() else None


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of a study: which (task, arm, seed), where, at which sizes and setting, and the command that started
    it; what `lab.studies.runner.evaluate_and_record` writes into ``result.json`` beside the measurements."""

    study: Study
    task: StudyTask
    arm: Arm
    seed: int
    out_dir: Path
    sizes: StudySizes
    quick: bool
    command: str
    setting: str | None = None
