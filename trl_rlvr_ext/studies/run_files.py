"""A run's files: ``<out_dir>/<task>/<arm>/seed<k>/result.json``, written last and atomically, so that a run is
finished exactly when its result exists and an interrupted study resumes where it stopped.
"""

import json
import os
from pathlib import Path

from .design import (
    Arm,
    StudyTask,
)


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def finished_result(out_dir: Path, task: StudyTask, arm: Arm, seed: int) -> dict | None:
    """The ``result.json`` of a finished run, ``None`` if the run has not finished (the file is written last)."""
    path = out_dir / task.name / arm.name / f"seed{seed}" / "result.json"
    return json.loads(path.read_text()) if path.is_file() else None
