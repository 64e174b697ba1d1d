"""Checks of `RLVRGRPOTrainer`'s inputs that run before TRL loads the model: a mistake costs a second, not a model load
and a first generation.

- Reward names: ``reward_funcs="toy_accuracy"`` (a name of `trl_rlvr_ext.rewards.REWARD_NAMES`) is that function.
  TRL would read any string as a reward *model* id and try the Hub with it, which hangs without a network.
- Columns: the columns each reward function reads (`trl_rlvr_ext.rewards.columns`), ``prompt``, and
  ``curation_id_column`` must be in the datasets. ``prompt`` is required only where TRL requires it: with an
  ``environment_factory``, each environment's ``reset()`` may supply the prompt (a dict factory's dataset can hold
  only an ``environment`` column), so TRL accepts a dataset without one and so do we.
"""

import os

from ..curation.controller import ROW_COLUMN
from ..data import can_be_hub_id
from ..rewards import REWARD_NAMES, get_reward_func
from ..rewards.columns import check_reward_columns


def resolve_reward_names(reward_funcs):
    """``reward_funcs`` with every registered reward name replaced by its function (other strings are reward model
    ids or paths, left to TRL; a path that does not exist fails at once)."""
    if reward_funcs is None:
        return None
    single = not isinstance(reward_funcs, list)
    resolved = []
    for func in [reward_funcs] if single else reward_funcs:
        if isinstance(func, str) and func in REWARD_NAMES:
            func = get_reward_func(func)
        elif isinstance(func, str) and not can_be_hub_id(func) and not os.path.exists(func):
            raise FileNotFoundError(
                f"The reward model {func!r} looks like a local path, but nothing is there. Give an existing folder, a "
                f"hub id, or a reward function (by name: {list(REWARD_NAMES)}, or the function itself)."
            )
        resolved.append(func)
    return resolved[0] if single else resolved


def curation_id_column_message(id_column: str, columns) -> str:
    return (
        f"curation_id_column={id_column!r} is not a column of the training set (its columns: {list(columns)}). Leave "
        "curation_id_column unset, and the trainer numbers the rows itself (in a 'curation_row' column); or add an "
        f"id column first: `dataset = dataset.add_column({id_column!r}, list(range(len(dataset))))`."
    )


def _columns_of(dataset):
    return getattr(dataset, "column_names", None)  # None for a stream whose columns are not known up front


def check_grpo_inputs(args, reward_funcs, train_dataset, eval_dataset, environment_factory=None) -> None:
    """Fail, naming the column and the fix, when a dataset lacks what the rewards, curation or GRPO need.

    ``environment_factory`` is the trainer's argument of that name: with one, a dataset may lack ``prompt``, as TRL's
    `GRPOTrainer` allows (it defaults each missing prompt to an empty user turn and lets ``reset()`` fill it)."""
    datasets = [("training set", train_dataset)]
    if isinstance(eval_dataset, dict):
        datasets += [(f"eval set {name!r}", dataset) for name, dataset in eval_dataset.items()]
    elif eval_dataset is not None:
        datasets.append(("eval set", eval_dataset))
    # Columns the trainer adds itself: curation numbers the training rows when no id column is named
    added = [ROW_COLUMN] if args.curation != "none" and args.curation_id_column is None else []
    for label, dataset in datasets:
        columns = _columns_of(dataset)
        if columns is None:
            continue
        if label == "training set":
            columns = [*columns, *(c for c in added if c not in columns)]
        if "prompt" not in columns and environment_factory is None:
            raise ValueError(
                f"The {label} has no 'prompt' column (its columns: {list(columns)}). GRPO generates from 'prompt': "
                "rename the column that holds the problems, e.g. `dataset = dataset.rename_column('question', "
                "'prompt')`, or pass an `environment_factory` whose `reset()` returns the prompt."
            )
        check_reward_columns(reward_funcs, columns, label)
    columns = _columns_of(train_dataset)
    id_column = args.curation_id_column
    if args.curation != "none" and id_column is not None and columns is not None and id_column not in columns:
        raise ValueError(curation_id_column_message(id_column, columns))
