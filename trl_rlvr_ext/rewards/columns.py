"""Which dataset columns a reward function reads, and the check that a dataset has them, before anything loads.

TRL calls a reward function as ``func(prompts=..., completions=..., completion_ids=..., <every other dataset column>,
trainer_state=..., log_extra=..., log_metric=...)``. A parameter of the function without a default that TRL does not
pass itself must therefore be a column of the dataset (``answer`` for `toy_accuracy_reward` and
`math_accuracy_reward`). Checking that up front turns "TypeError: missing 1 required keyword-only argument" at the first
step (after the model loaded and generated) into a message that names the column and the fix.
"""

import functools
import inspect
from collections.abc import Callable, Sequence


# Keyword arguments TRL's GRPOTrainer (and this package's guard) pass to every reward function
TRL_REWARD_KWARGS = (
    "prompts",
    "completions",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
    "environments",
    "reward_timeout",
)


def reward_columns(func) -> list[str]:
    """The dataset columns ``func`` requires: its parameters without a default that TRL does not pass itself (none for
    a reward model, a model id, or a function without an inspectable signature)."""
    while hasattr(func, "__wrapped__") and not isinstance(func, functools.partial):
        func = func.__wrapped__
    bound = set()
    while isinstance(func, functools.partial):
        bound |= set(func.keywords)
        func = func.func
    if isinstance(func, str) or not callable(func):
        return []
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [
        p.name
        for p in parameters
        if p.kind in kinds
        and p.default is inspect.Parameter.empty
        and p.name not in TRL_REWARD_KWARGS
        and p.name not in bound
        and p.name != "self"
    ]


def _name(func) -> str:
    inner = func
    while isinstance(inner, functools.partial):
        inner = inner.func
    return getattr(inner, "__name__", type(inner).__name__)


def missing_column_message(reward_name: str, missing: Sequence[str], columns: Sequence[str], dataset: str) -> str:
    return (
        f"The reward function {reward_name!r} reads the column(s) {list(missing)}, which the {dataset} does not have "
        f"(its columns: {list(columns)}). Rename the column that holds them (in Python, "
        f"`dataset = dataset.rename_column('solution', {missing[0]!r})`), or choose a reward that reads the columns "
        "this dataset has. TRL passes every column but 'prompt' to the reward functions by name."
    )


def check_reward_columns(reward_funcs: Sequence[Callable] | Callable | None, columns, dataset: str) -> None:
    """Raise a ``ValueError`` naming the reward, the missing column(s), the columns present and the fix when
    ``columns`` (a dataset's column names; ``None`` for a stream whose columns are unknown) lacks one a reward needs."""
    if columns is None or reward_funcs is None:
        return
    funcs = reward_funcs if isinstance(reward_funcs, list | tuple) else [reward_funcs]
    available = set(columns)
    for func in funcs:
        missing = [c for c in reward_columns(func) if c not in available]
        if missing:
            raise ValueError(missing_column_message(_name(func), missing, list(columns), dataset))
