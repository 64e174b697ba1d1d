"""Studies: arms x seeds on tasks, evaluated by Pass@k, written up as a table and plots (``trl-rlvr-ext study``).

`STUDIES` maps a study's name to the function that builds it; `run_study` runs (or resumes) one.
"""

from .runner import (
    QUICK,
    Arm,
    Column,
    Study,
    StudySizes,
    StudyTask,
    log_column,
    run_study,
    summarize,
    train_log_series,
)


def _self_study():
    from .self_study import make_study

    return make_study()


def _lora_init_study():
    from .lora_init_study import make_study

    return make_study()


STUDIES = {"self": _self_study, "lora_init": _lora_init_study}


def get_study(name: str) -> Study:
    """The study called ``name`` (one of `STUDIES`)."""
    if name not in STUDIES:
        raise ValueError(f"Unknown study {name!r}. Choose one of {sorted(STUDIES)}.")
    return STUDIES[name]()


__all__ = [
    "QUICK",
    "STUDIES",
    "Arm",
    "Column",
    "Study",
    "StudySizes",
    "StudyTask",
    "get_study",
    "log_column",
    "run_study",
    "summarize",
    "train_log_series",
]
