"""What one run reads: the task's splits, reward and base model (`load_run_inputs`), the validation split a setting
evaluates on, and the training settings every arm shares.
"""

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .design import (
    StudySizes,
    StudyTask,
)


def common_training_settings(run_dir: Path, sizes: StudySizes, seed: int, quick: bool = False) -> dict:
    """The trainer settings every study run shares (GRPO or DPO): a constant learning rate, one optimizer step per
    batch, logs every ``probe_every`` steps, no checkpoints, no reporting, CPU, no activation checkpointing (it only
    slows a tiny model down).

    A ``quick`` run (a smoke run, and what the golden copies under tests/golden/studies record) trains in fp32 instead
    of TRL's default bf16 autocast: bf16 sums depend on the CPU's kernels (a quick IS-DPO run's KL was -0.010092 on an
    AVX2-only CPU and -0.010234 on an AVX512-BF16 one), while fp32 results differ across instruction sets by float32
    rounding only, which the golden comparison allows; and bf16 autocast is about ten times slower on a CPU without
    native bf16. Full runs keep TRL's default, which every recorded study ran with."""
    precision = {"bf16": False} if quick else {}
    return {
        "output_dir": str(run_dir / "train"),
        "learning_rate": sizes.learning_rate,
        "lr_scheduler_type": "constant",
        "gradient_accumulation_steps": 1,
        "max_steps": sizes.max_steps,
        "logging_steps": max(1, min(sizes.probe_every, sizes.max_steps)),
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "activation_checkpointing": False,
        "seed": seed,
        **precision,
    }


class RunInputs(NamedTuple):
    """What every run of a task reads: its splits, the held-out problems it is evaluated on, the held-out problems
    its probes follow during training (the first ``probe_problems``), the reward, and the base model's path."""

    splits: object  # a DatasetDict with "train" and "test"
    test: object  # the first ``eval_problems`` held-out rows
    probe_rows: list[dict]
    reward: Callable
    base_path: str
    # which held-out rows the run measures, for its record, where they are not the test problems (`evaluate_on`)
    evaluated_on: dict | None = None


def base_model_path(task: StudyTask, quick: bool, base: dict | None = None) -> str:
    """The path of ``task``'s base model; ``base`` (`Setting.base`) overrides its warm-start settings, which only a
    task whose ``base_model`` takes keyword arguments accepts."""
    if not base:
        return task.base_model(quick)
    accepts = inspect.signature(task.base_model).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepts):
        raise ValueError(
            f"The setting overrides the base's warm start ({base}), but task {task.name!r} builds no base whose warm "
            "start can change (its base_model takes no settings): run the setting on a reasoning-gym preset task."
        )
    return task.base_model(quick, **base)


def load_run_inputs(
    task: StudyTask, sizes: StudySizes, quick: bool, evaluate_on: str = "test", base: dict | None = None
) -> RunInputs:
    """The run's inputs. With ``evaluate_on="validation"`` (`Setting.evaluate_on`) ``test`` and ``probe_rows`` are
    the validation problems (`validation_split`, ``eval_problems`` of them), so that nothing the run measures is a
    test problem. ``base`` overrides the base's warm-start settings (`Setting.base`, `base_model_path`)."""
    from datasets import Dataset

    from trl_rlvr_ext.data import load_named_dataset
    from trl_rlvr_ext.rewards import get_reward_func

    splits = load_named_dataset(task.dataset)
    held_out = splits["test"]
    evaluated_on = None
    if evaluate_on == "validation":
        rows, description = validation_split(splits, sizes, sizes.eval_problems)
        test, probe_rows = Dataset.from_list(rows), rows[: sizes.probe_problems]
        evaluated_on = {"name": "validation", **description}
    else:
        test = held_out.select(range(min(sizes.eval_problems, held_out.num_rows)))
        probe_rows = [held_out[i] for i in range(min(sizes.probe_problems, held_out.num_rows))]
    return RunInputs(
        splits=splits,
        test=test,
        probe_rows=probe_rows,
        reward=get_reward_func(task.reward),
        base_path=base_model_path(task, quick, base),
        evaluated_on=evaluated_on,
    )


def _prompt_key(prompt) -> str:
    return json.dumps(prompt, sort_keys=True)  # a conversational prompt (a list of messages) compares as its JSON


def validation_split(splits, sizes: StudySizes, num_problems: int, data_prompts: int = 0) -> tuple[list[dict], dict]:
    """The validation problems: held-out rows ``[start, start + num_problems)``, ``start`` the number of held-out rows
    the test problems and probes take (``max(eval_problems, probe_problems)``). Returns ``(rows, description)``.

    Why the held-out split's tail and not train rows: the studies' bases are warm-started on every train row
    (``trl_rlvr_ext.gym_bases``: 1000 steps x 64 rows drawn from the 2000, ~32 epochs), so they have seen the
    train rows' answers: on number_sorting the base's greedy accuracy is 0.75 on train rows 1000-1099 against 0.55 on
    the test problems and 0.50 on held-out rows 100-199. Validation on memorised rows would not track the test
    problems. The held-out tail has never been trained on and is drawn like the test problems.

    Fails, naming the fix, when the held-out split is too short, or when a validation prompt is also a test problem,
    one of the first ``data_prompts`` train rows (a study's preference data; 0: none) or any other train prompt.
    """
    held_out, train = splits["test"], splits["train"]
    start = max(sizes.eval_problems, sizes.probe_problems)
    stop = start + num_problems
    if stop > held_out.num_rows:
        raise ValueError(
            f"{num_problems} validation problems after the {start} test problems need {stop} held-out rows; the split "
            f"has {held_out.num_rows}. Lower eval_problems / probe_problems, or raise the dataset's test_size."
        )
    rows = [held_out[i] for i in range(start, stop)]
    validation = {_prompt_key(row["prompt"]) for row in rows}
    train_prompts = [_prompt_key(prompt) for prompt in train["prompt"]]
    others = {
        f"test problems (held-out rows 0-{start - 1})": {_prompt_key(held_out[i]["prompt"]) for i in range(start)}
    }
    if data_prompts:
        others[f"preference-data prompts (train rows 0-{data_prompts - 1})"] = set(train_prompts[:data_prompts])
    others["other train prompts (the base's warm start)"] = set(train_prompts[data_prompts:])
    for name, prompts in others.items():
        if shared := validation & prompts:
            raise ValueError(
                f"{len(shared)} validation prompt(s) are also {name}, e.g. {min(shared)[:80]}: the validation "
                "problems must be unseen. Use a dataset whose held-out split excludes train questions (reasoning_gym: "
                "dedup=exact)."
            )
    return rows, {"split": "test", "rows": [start, stop], "problems": num_problems}
