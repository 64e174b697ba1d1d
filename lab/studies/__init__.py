"""Studies: arms x seeds on tasks, evaluated by Pass@k, written up as a table and plots (``python -m lab study``, run from a clone).

`STUDIES` (`lab.studies.registry`) maps a study's name to the package that builds it and declares its page;
`run_study` runs (or resumes) one.
"""

from .design import QUICK, Arm, Column, Setting, Study, StudySizes, StudyTask, log_column, train_log_series
from .registry import STUDIES, get_study
from .runner import StudyPlan, plan_study, run_study
from .summary import summarize


__all__ = [
    "QUICK",
    "STUDIES",
    "Arm",
    "Column",
    "Setting",
    "Study",
    "StudyPlan",
    "StudySizes",
    "StudyTask",
    "get_study",
    "log_column",
    "plan_study",
    "run_study",
    "summarize",
    "train_log_series",
]
