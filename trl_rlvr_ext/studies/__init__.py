"""Studies: arms x seeds on tasks, evaluated by Pass@k, written up as a table and plots (``trl-rlvr-ext study``).

`STUDIES` maps a study's name to the function that builds it; `run_study` runs (or resumes) one.
"""

from .runner import QUICK, Arm, Study, StudySizes, StudyTask, run_study, summarize


def _self_study():
    from .self_study import make_study

    return make_study()


STUDIES = {"self": _self_study}


def get_study(name: str) -> Study:
    """The study called ``name`` (one of `STUDIES`)."""
    if name not in STUDIES:
        raise ValueError(f"Unknown study {name!r}. Choose one of {sorted(STUDIES)}.")
    return STUDIES[name]()


__all__ = ["QUICK", "STUDIES", "Arm", "Study", "StudySizes", "StudyTask", "get_study", "run_study", "summarize"]
