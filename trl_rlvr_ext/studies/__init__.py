"""Studies: arms x seeds on tasks, evaluated by Pass@k, written up as a table and plots (``trl-rlvr-ext study``).

`STUDIES` maps a study's name to the module that builds it; `run_study` runs (or resumes) one.
"""

from .runner import (
    QUICK,
    Arm,
    Column,
    Setting,
    Study,
    StudySizes,
    StudyTask,
    log_column,
    run_study,
    summarize,
    train_log_series,
)


# name -> the module (of this package) whose ``make_study()`` builds it; imported only when the study is asked for, so
# that ``trl-rlvr-ext study --help`` stays light.
STUDIES = {
    "self": "self_study",
    "nsr": "nsr_study",
    "is_dpo": "is_dpo_study",
    "lora_init": "lora_init_study",
}


def get_study(name: str) -> Study:
    """The study called ``name`` (one of `STUDIES`)."""
    if name not in STUDIES:
        raise ValueError(f"Unknown study {name!r}. Choose one of {sorted(STUDIES)}.")
    import importlib

    return importlib.import_module(f".{STUDIES[name]}", __name__).make_study()


__all__ = [
    "QUICK",
    "STUDIES",
    "Arm",
    "Column",
    "Setting",
    "Study",
    "StudySizes",
    "StudyTask",
    "get_study",
    "log_column",
    "run_study",
    "summarize",
    "train_log_series",
]
