"""A study on a user's own task: ``python -m lab study <name> --tasks <dataset name>``.

Besides a study's own task names, ``--tasks`` takes a dataset name the data layer loads (`trl_rlvr_ext.data`):

- a ``reasoning_gym:`` name: reward ``reasoning_gym``, gold completions ``<answer>{answer}</answer>``, and a base
  warm-started on its train split and cached as for the presets (`trl_rlvr_ext.gym_bases`; 400 steps, 1000
  for a mixture, like the presets);
- ``toy:arithmetic``: reward ``toy_accuracy`` and the toy base;
- any other dataset with ``prompt`` and ``answer`` columns and ``train`` / ``test`` splits: ``--reward`` and
  ``--base_model`` are then required (nothing is known about how to warm-start a base for it), and the probes
  teacher-force the ``answer`` column as the completion.

The task's directory is ``<task part>-<hash of the name>`` (a dataset name is not a folder name); its runs record a
rerun command with the dataset name itself. With ``--quick`` every task starts from the tiny random model, as the
study's own tasks do. The study's table gives its trivial-policy baseline where one can be built
(`lab.studies.baselines`).
"""

import dataclasses
import hashlib
import os
import re
import shlex

from .design import Study, StudyTask


# Warm-start steps of a user's reasoning-gym base: those of the presets (a mixture learns several skills)
GYM_STEPS, GYM_MIXTURE_STEPS = 400, 1000


def is_dataset_name(name: str) -> bool:
    """Whether a ``--tasks`` entry that is no task of the study names a dataset (``toy:``/``reasoning_gym:`` names,
    an existing path, or an ``org/name`` hub id) rather than a mistyped task name."""
    return ":" in name or os.path.exists(name) or "/" in name


def task_dir_name(dataset: str) -> str:
    """A folder name for a dataset name: its task part made safe, and a hash of the whole name."""
    head = dataset.split("?")[0].split(":")[-1].replace("+", "_")
    head = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(head.rstrip("/"))) or "dataset"
    return f"{head}-{hashlib.sha256(dataset.encode()).hexdigest()[:8]}"


def _answer_length(dataset: str, completion) -> int:
    """Tokens of the longest gold completion of the train split (the byte tokenizer: one token per byte), plus EOS
    and two of slack: the generation budget."""
    from trl_rlvr_ext.data import load_split

    answers = load_split(dataset, "train")["answer"]
    return max(len(completion({"answer": a}).encode()) for a in answers) + 3


def dataset_task(dataset: str, reward: str | None = None, base_model: str | None = None) -> StudyTask:
    """The `StudyTask` of a dataset name (see the module docstring)."""
    from trl_rlvr_ext.data import check_dataset_name, load_split

    check_dataset_name(dataset)
    flags = f" --reward {shlex.quote(reward)}" if reward else ""
    flags += f" --base_model {shlex.quote(base_model)}" if base_model else ""
    if dataset.startswith("reasoning_gym:"):
        steps = GYM_MIXTURE_STEPS if "+" in dataset.split("?")[0] else GYM_STEPS

        from .tasks import gym_base
        from .tasks import gym_gold as gold

        base, reward = gym_base(dataset, base_model, num_steps=steps), reward or "reasoning_gym"
    elif dataset.split("?")[0] == "toy:arithmetic":
        from trl_rlvr_ext.data import toy_base_for

        toy_base_name = toy_base_for(dataset)  # warm-started on the task's own digit range

        def toy_base(quick: bool) -> str:
            from trl_rlvr_ext.data import resolve_model_name_or_path

            return base_model or resolve_model_name_or_path("toy:tiny" if quick else toy_base_name)

        from .tasks import toy_gold as gold

        base, reward = toy_base, reward or "toy_accuracy"
    else:
        if not (reward and base_model):
            raise ValueError(
                f"--tasks {dataset}: a study on a dataset other than reasoning_gym: and toy: names needs --reward (the "
                "reward function's name) and --base_model (the model every arm starts from): no base can be "
                "warm-started for it."
            )
        columns = load_split(dataset, "test").column_names
        if not {"prompt", "answer"} <= set(columns):
            raise ValueError(
                f"--tasks {dataset}: a study's dataset needs 'prompt' and 'answer' columns, it has {columns}."
            )

        def given_base(quick: bool) -> str:
            from trl_rlvr_ext.data import resolve_model_name_or_path

            return resolve_model_name_or_path("toy:tiny") if quick else base_model

        from .tasks import number_gold as gold  # the answer column as the completion

        base = given_base
    return StudyTask(
        task_dir_name(dataset),
        dataset,
        reward,
        base,
        gold,
        _answer_length(dataset, gold),
        selector=shlex.quote(dataset) + flags,
    )


def with_dataset_tasks(
    study: Study, tasks: list[str], reward: str | None = None, base_model: str | None = None
) -> tuple[Study, list[str]]:
    """``study`` with a task for each entry of ``tasks`` that names a dataset rather than one of its tasks, and
    ``tasks`` with those entries replaced by the new tasks' names. ``reward`` / ``base_model`` apply to those only."""
    if study.run_one is not None and any(t not in study.tasks and is_dataset_name(t) for t in tasks):
        raise ValueError(
            f"The study {study.name!r} runs its own kind of task ({sorted(study.tasks)}); a dataset name in --tasks "
            "works with the GRPO studies (self, nsr, lora_init)."
        )
    added, names = {}, []
    for name in tasks:
        if name in study.tasks or not is_dataset_name(name):
            names.append(name)
            continue
        task = dataset_task(name, reward=reward, base_model=base_model)
        added[task.name] = task
        names.append(task.name)
    if not added:
        if reward or base_model:
            raise ValueError("--reward and --base_model are for a dataset name in --tasks; there is none.")
        return study, names
    return dataclasses.replace(study, tasks={**study.tasks, **added}), names
