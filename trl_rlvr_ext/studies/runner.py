"""The study runner: arms x seeds on tasks, Pass@k of every final model, a table and plots, resumable.

A *study* tests one claim. It names its tasks (`StudyTask`: a dataset, a reward, a base model), its arms (`Arm`: no
training, or `RLVRGRPOTrainer` with some options) and its sizes (`StudySizes`). `run_study` runs every
(task, arm, seed) not yet finished into ``<out_dir>/<task>/<arm>/seed<k>/result.json`` (written last, atomically:
a run is finished exactly when that file exists, so an interrupted study resumes where it stopped), then writes
``<out_dir>/results.md`` (mean ± sd over seeds) and, per task, ``<task>_pass_at_k.png`` and ``<task>_boundary.png``.

Each run records its wall time, the command that started the study and a command that reruns just that run. During
training a `BoundaryProbeCallback` follows the log-likelihood of correct held-out solutions (the gold completions of
the first ``probe_problems`` held-out problems). Evaluation samples at temperature 1 (the policy's own distribution,
as GRPO samples it) with the sampling seed ``1000 + seed``, so the base arm's spread over seeds is the evaluation
noise.
"""

import dataclasses
import inspect
import json
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .design import (  # noqa: F401  (re-exported: the names the studies import from the runner)
    EVALUATE_PRECISIONS,
    QUICK,
    Arm,
    Column,
    Setting,
    Study,
    StudySizes,
    StudyTask,
    log_column,
    train_log_series,
)
from .records import end_probe


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def common_training_settings(run_dir: Path, sizes: StudySizes, seed: int) -> dict:
    """The trainer settings every study run shares (GRPO or DPO): a constant learning rate, one optimizer step per
    batch, logs every ``probe_every`` steps, no checkpoints, no reporting, CPU, no activation checkpointing (it only
    slows a tiny model down)."""
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
    }


def updates_made(result: dict) -> int:
    """The optimizer updates a run made: its ``max_steps`` less the steps its curation skipped (the cumulative
    ``curation/skipped_steps`` of its last log entry; 0 without curation)."""
    skipped = [e["curation/skipped_steps"] for e in result.get("train_log", []) if "curation/skipped_steps" in e]
    max_steps = (result.get("grpo_config") or {}).get("max_steps", result["sizes"]["max_steps"])
    return int(max_steps - (skipped[-1] if skipped else 0))


def _steps_per_generation(result: dict) -> int:
    return (result.get("grpo_config") or {}).get("steps_per_generation", result["sizes"]["steps_per_generation"])


def generation_batches(result: dict) -> float:
    """The generation batches a run's steps cover: its ``max_steps`` (the run's own, else the study's) over
    ``steps_per_generation``."""
    max_steps = (result.get("grpo_config") or {}).get("max_steps", result["sizes"]["max_steps"])
    return max_steps / _steps_per_generation(result)


def prompts_trained(result: dict) -> float:
    """The prompts a run trained on, summed over its generation batches: each logging window's mean of
    ``curation/kept_prompts`` (logged once per scored batch, 0 for a batch dropped whole) times the batches the window
    holds (its steps over ``steps_per_generation``); a run without curation trains on every prompt of every batch."""
    per_generation = _steps_per_generation(result)
    kept = train_log_series(result, "curation/kept_prompts")
    if not kept:
        return float(result["sizes"]["num_prompts"] * generation_batches(result))
    total, previous = 0.0, 0
    for step, value in kept:
        total += value * (step - previous) / per_generation
        previous = step
    return total


def _budget_source(out_dir: Path, task: StudyTask, arm: Arm, source: str, seed: int, what: str) -> dict:
    done = finished_result(out_dir, task, Arm(source), seed)
    if done is None:
        raise ValueError(
            f"Arm {arm.name!r} trains for as many {what} as {source!r} did on seed {seed}, which has not run in "
            f"{out_dir}/{task.name}: run --arms {source} first (or list it before {arm.name})."
        )
    return done


def same_budget_arm(out_dir: Path, task: StudyTask, arm: Arm, seed: int, sizes: "StudySizes") -> tuple[Arm, dict]:
    """``arm`` with ``max_steps`` set to the budget of its source arm's same-seed run, and the budget record.

    ``same_updates_as``: the updates that run made (`updates_made`); record ``{"same_updates_as": name, "updates":
    n}``. ``same_prompts_as``: as many whole generation batches of ``sizes.num_prompts`` prompts as the prompts that
    run trained on (`prompts_trained`, rounded to the nearest batch, at least one), times ``steps_per_generation``;
    record ``{"same_prompts_as": name, "prompts": p, "updates": n}``. Fails naming the run to make first."""
    if arm.same_updates_as:
        updates = updates_made(_budget_source(out_dir, task, arm, arm.same_updates_as, seed, "updates"))
        if updates < 1:
            raise ValueError(f"{arm.same_updates_as!r} seed {seed} made no update: there is no budget to match.")
        budget = {"same_updates_as": arm.same_updates_as, "updates": updates}
    else:
        prompts = prompts_trained(_budget_source(out_dir, task, arm, arm.same_prompts_as, seed, "prompts"))
        if prompts <= 0:
            raise ValueError(f"{arm.same_prompts_as!r} seed {seed} trained on no prompt: there is no budget to match.")
        batches = max(1, round(prompts / sizes.num_prompts))
        updates = batches * sizes.steps_per_generation
        budget = {"same_prompts_as": arm.same_prompts_as, "prompts": round(prompts, 3), "updates": updates}
    return dataclasses.replace(arm, config={**arm.config, "max_steps": updates}), budget


def finished_result(out_dir: Path, task: StudyTask, arm: Arm, seed: int) -> dict | None:
    """The ``result.json`` of a finished run, ``None`` if the run has not finished (the file is written last)."""
    path = out_dir / task.name / arm.name / f"seed{seed}" / "result.json"
    return json.loads(path.read_text()) if path.is_file() else None


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

    from ..data import load_named_dataset
    from ..rewards import get_reward_func

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
    (``trl_rlvr_ext.studies.gym_bases``: 1000 steps x 64 rows drawn from the 2000, ~32 epochs), so they have seen the
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


def _grpo_config(run_dir: Path, task: StudyTask, arm: Arm, sizes: StudySizes, seed: int):
    from ..grpo.grpo_config import RLVRGRPOConfig

    settings = {
        **common_training_settings(run_dir, sizes, seed),
        "loss_type": "dapo",
        "beta": 0.0,
        "num_generations": sizes.num_generations,
        "per_device_train_batch_size": sizes.num_prompts * sizes.num_generations // sizes.steps_per_generation,
        "steps_per_generation": sizes.steps_per_generation,
        "max_completion_length": task.max_completion_length,
        "temperature": 1.0,
        "remove_unused_columns": False,  # the rewards read the dataset's columns
        **arm.config,
    }
    return RLVRGRPOConfig(**settings), settings


def run_one(
    study: Study,
    task: StudyTask,
    arm: Arm,
    seed: int,
    out_dir: Path,
    sizes: StudySizes,
    quick: bool,
    command: str,
    setting: str | None = None,
) -> dict:
    """One (task, arm, seed): train (unless the arm is the base), evaluate Pass@k, write ``result.json``. ``arm``
    already carries ``setting``'s config (`Study.arm_in_setting`); the name is recorded."""
    from ..evaluation.boundary import BoundaryProbeCallback

    if (done := finished_result(out_dir, task, arm, seed)) is not None:
        return done
    run_dir = out_dir / task.name / arm.name / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    evaluate_on = study.get_setting(setting).evaluate_on if setting is not None else "test"
    precision = study.get_setting(setting).evaluate_precision if setting is not None else "trainer"
    base = study.get_setting(setting).base if setting is not None else {}
    splits, test, probe_rows, reward, base_path, evaluated_on = load_run_inputs(task, sizes, quick, evaluate_on, base)
    model, tokenizer, boundary, log_history, config = base_path, None, [], [], None
    train_seconds = 0.0
    parameters, lora_init, budget = None, None, None
    if arm.same_updates_as or arm.same_prompts_as:
        arm, budget = same_budget_arm(out_dir, task, arm, seed, sizes)
    if arm.train:
        from transformers import AutoTokenizer

        from ..grpo.grpo_trainer import RLVRGRPOTrainer

        args, config = _grpo_config(run_dir, task, arm, sizes, seed)
        tokenizer = AutoTokenizer.from_pretrained(base_path)
        probes = [{"prompt": row["prompt"], "completion": task.gold_completion(row)} for row in probe_rows]
        peft_config = None
        if arm.peft is not None:
            from peft import LoraConfig

            peft_config = LoraConfig(**arm.peft)
        trainer = RLVRGRPOTrainer(
            model=base_path,
            reward_funcs=reward,
            args=args,
            train_dataset=splits["train"],
            processing_class=tokenizer,
            peft_config=peft_config,
        )
        # what the arm trains: every weight, or only an adapter (and how that adapter was initialised)
        parameters = {
            "trainable": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
            "total": sum(p.numel() for p in trainer.model.parameters()),
        }
        if arm.peft is not None:
            from ..lora_init import get_lora_init_info

            info = get_lora_init_info(trainer.model)
            lora_init = info.to_dict() if info is not None else None
        probe = BoundaryProbeCallback(probes, trainer=trainer, eval_steps=sizes.probe_every)
        trainer.add_callback(probe)
        t0 = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - t0
        boundary, log_history = probe.history, trainer.state.log_history
        model = trainer.model
        if precision == "fp32":
            model = trainer.accelerator.unwrap_model(model, keep_fp32_wrapper=False)
        model.eval()
    extra = {
        "boundary": [{"step": step, **metrics} for step, metrics in boundary],
        "train_log": log_history,
        "grpo_config": config,
        "peft": arm.peft,
        "parameters": parameters,
        "lora_init": lora_init,
        **({"budget": budget} if budget is not None else {}),
    }
    if precision != "trainer" and arm.train:
        extra["evaluated_precision"] = precision
    if base:
        extra["base_overrides"] = base
    if evaluated_on:  # the record's pass@k is not on the test problems: it says so
        extra["evaluated_on"] = evaluated_on
    result = evaluate_and_record(
        study,
        task,
        arm,
        seed,
        out_dir,
        sizes,
        quick,
        command,
        model,
        tokenizer,
        test,
        reward,
        base_path,
        start,
        train_seconds,
        extra,
        setting=setting,
    )
    return result


def evaluate_and_record(
    study: Study,
    task: StudyTask,
    arm: Arm,
    seed: int,
    out_dir: Path,
    sizes: StudySizes,
    quick: bool,
    command: str,
    model,
    tokenizer,
    test,
    reward,
    base_path: str,
    start: float,
    train_seconds: float,
    extra: dict,
    setting: str | None = None,
) -> dict:
    """The end of every run: the final model's unbiased Pass@k on the held-out problems (temperature 1, sampling seed
    ``1000 + seed``), then ``result.json`` (the keys the table reads, ``extra``, the wall time since ``start`` and a
    command that reruns just this run), written last and atomically."""
    from ..evaluation import evaluate_pass_at_k

    evaluation = evaluate_pass_at_k(
        model,
        test,
        reward,
        tokenizer=tokenizer,
        num_samples=sizes.eval_samples,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=task.max_completion_length,
        batch_size=max(256, 2 * sizes.eval_samples),
        seed=1000 + seed,
        label=f"{task.name}/{arm.name}/seed{seed}",
        progress=False,
    )
    result = {
        "study": study.name,
        "task": task.name,
        "arm": arm.name,
        "seed": seed,
        **({"setting": setting} if setting is not None else {}),
        "quick": quick,
        "dataset": task.dataset,
        "reward": task.reward,
        "base_model": base_path,
        "pass_at_k": {str(k): v for k, v in evaluation.pass_at_k.items()},
        "num_correct": evaluation.num_correct.tolist(),
        "num_samples": int(sizes.eval_samples),
        **extra,
        "sizes": dataclasses.asdict(sizes),
        "train_seconds": round(train_seconds, 1),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "command": command,
        "rerun_command": f"{command.split(' --')[0]} --out_dir {out_dir} --tasks {task.selector or task.name} "
        f"--arms {arm.name} --seeds {seed}"
        + (f" --setting {setting}" if setting is not None else "")
        + (" --quick" if quick else "")
        + size_flags(study, sizes, quick, setting),
    }
    _atomic_write(
        out_dir / task.name / arm.name / f"seed{seed}" / "result.json", json.dumps(result, indent=1, default=float)
    )
    return result


def size_flags(study: Study, sizes: StudySizes, quick: bool, setting: str | None = None) -> str:
    """The ``--<size> <value>`` flags that turn the study's default sizes (in ``setting``) into ``sizes``."""
    reference = study.default_sizes(quick, setting)
    changed = [f.name for f in dataclasses.fields(sizes) if getattr(sizes, f.name) != getattr(reference, f.name)]
    return "".join(f" --{name} {getattr(sizes, name)}" for name in changed)


def _mean_sd(values: list[float], digits: int = 3) -> str:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def chance_pass_at_k(dataset: str, num_problems: int, ks: list[int]) -> dict[int, float] | None:
    """Pass@k of guessing: each sample drawn from the train split's answer distribution (``None`` without an
    ``answer`` column). A pass@k near it is guessing, not computing."""
    from ..data import load_named_dataset

    splits = load_named_dataset(dataset)
    if "answer" not in splits["train"].column_names:
        return None
    counts: dict[str, int] = {}
    for answer in splits["train"]["answer"]:
        counts[answer] = counts.get(answer, 0) + 1
    test = splits["test"]["answer"][:num_problems]
    rates = [counts.get(answer, 0) / splits["train"].num_rows for answer in test]
    return {k: statistics.fmean(1 - (1 - q) ** k for q in rates) for k in ks}


def trivial_row(result: dict, ks: list[int], width: int) -> str | None:
    """The table row of the strongest trivial policy of a run's task (`trl_rlvr_ext.studies.baselines`) on its
    evaluation problems, mean ± sd over guess seeds 0, 1, 2; ``None`` where the task has none."""
    from .baselines import strongest_trivial_pass_at_k

    trivial = strongest_trivial_pass_at_k(
        result["dataset"], result["reward"], len(result["num_correct"]), result["num_samples"]
    )
    if trivial is None:
        return None
    arm, values = trivial
    cells = [f"{arm} (guess from the prompt's structure)", "0,1,2", *[_mean_sd(values[k]) for k in ks]]
    return "| " + " | ".join(cells + ["-"] * (width - len(cells))) + " |"


def summarize(study: Study, results: list[dict], out_dir: Path) -> str:
    """Write ``results.md`` (mean ± sd over seeds per task and arm) and the plots; returns the markdown."""
    lines = [f"# Study `{study.name}`", "", study.claim, ""]
    if any(r["quick"] for r in results):
        lines += ["**--quick: a smoke run on untrained tiny models; these numbers mean nothing.**", ""]
    for task_name in dict.fromkeys(r["task"] for r in results):
        rows = [r for r in results if r["task"] == task_name]
        ks = sorted({int(k) for r in rows for k in r["pass_at_k"]})
        shown = [k for k in ks if k == 1 or k == ks[-1] or k in (4, 16, 64)]
        lines += [f"## {task_name}", "", f"Dataset `{rows[0]['dataset']}`, reward `{rows[0]['reward']}`.", ""]
        header = ["arm", "seeds", *[f"pass@{k}" for k in shown]]
        has_boundary = any(r["boundary"] for r in rows)
        if has_boundary:
            header += ["interference_frac (end)", "winner_take_all (end)"]
        header += [c.header for c in study.columns] + ["train s", "wall s"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for arm_name in dict.fromkeys(r["arm"] for r in rows):
            runs = [r for r in rows if r["arm"] == arm_name]
            cells = [arm_name, ",".join(str(r["seed"]) for r in runs)]
            cells += [_mean_sd([r["pass_at_k"].get(str(k)) for r in runs]) for k in shown]
            for key in ("interference_frac", "winner_take_all") if has_boundary else ():
                ends = [p.get(f"boundary/{key}") for r in runs if (p := end_probe(r)) is not None]
                cells.append(_mean_sd(ends) if ends else "-")
            cells += [_mean_sd([c.value(r) for r in runs], c.digits) for c in study.columns]
            cells += [_mean_sd([r[key] for r in runs], digits=0) for key in ("train_seconds", "wall_seconds")]
            lines.append("| " + " | ".join(cells) + " |")
        chance = chance_pass_at_k(rows[0]["dataset"], len(rows[0]["num_correct"]), shown)
        if chance is not None:
            cells = ["chance (guess from the train answers)", "-", *[f"{chance[k]:.3f}" for k in shown]]
            lines.append("| " + " | ".join(cells + ["-"] * (len(header) - len(cells))) + " |")
        trivial = trivial_row(rows[0], shown, len(header))
        if trivial:
            lines.append(trivial)
        lines += [""]
        if any(arm in study.arms and not study.arms[arm].train for arm in (r["arm"] for r in rows)):
            lines += [
                "The base arm's spread over seeds is the evaluation noise (its seeds differ only in the sampling seed).",
                "",
            ]
        _plot(task_name, rows, out_dir, has_boundary)
        lines += [f"![Pass@k]({task_name}_pass_at_k.png)"]
        if has_boundary:
            lines += [f"![boundary]({task_name}_boundary.png)"]
        if study.curves:
            _plot_curves(task_name, rows, study.curves, out_dir)
            lines += [f"![training curves]({task_name}_training.png)"]
        for plot in study.plots:
            lines += plot(task_name, rows, out_dir)
        lines += [""]
    lines += ["Commands (each run's own rerun command is in its result.json):", ""]
    lines += [f"    {c}" for c in dict.fromkeys(r["command"] for r in results)]
    markdown = "\n".join(lines) + "\n"
    _atomic_write(out_dir / "results.md", markdown)
    return markdown


def _plot(task_name: str, rows: list[dict], out_dir: Path, has_boundary: bool = True) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in arms:
        runs = [r for r in rows if r["arm"] == arm]
        ks = sorted(int(k) for k in runs[0]["pass_at_k"])
        values = np.array([[r["pass_at_k"][str(k)] for k in ks] for r in runs])
        mean, sd = values.mean(axis=0), values.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(len(ks))
        ax.plot(ks, mean, marker="o", label=f"{arm} (n={len(runs)})")
        ax.fill_between(ks, mean - sd, mean + sd, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="k", ylabel="pass@k (held out)", title=f"{task_name}: Pass@k, mean ± sd over seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / f"{task_name}_pass_at_k.png", dpi=120)
    plt.close(fig)
    if not has_boundary:
        return

    keys = ["mean_logp_correct", "interference_frac", "winner_take_all", "delta_q1", "delta_q5"]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.5))
    for arm in arms:
        runs = [r for r in rows if r["arm"] == arm and r["boundary"]]
        if not runs:
            continue
        # seeds of an arm that matches another run's budget stop at different steps, so their probes differ: the
        # union of the steps, NaN where a seed has no probe
        steps = sorted({b["step"] for r in runs for b in r["boundary"]})
        for ax, key in zip(axes, keys):
            by_step = [{b["step"]: b.get(f"boundary/{key}", np.nan) for b in r["boundary"]} for r in runs]
            values = np.array([[probes.get(step, np.nan) for step in steps] for probes in by_step], dtype=float)
            with warnings.catch_warnings():  # winner_take_all is NaN at step 0 (no change yet): an empty mean is NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=0)
            ax.plot(steps, mean, marker=".", label=arm)
    for ax, key in zip(axes, keys):
        ax.set(title=key, xlabel="step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{task_name}: probe log-likelihood of correct held-out solutions (mean over seeds)")
    fig.tight_layout()
    fig.savefig(out_dir / f"{task_name}_boundary.png", dpi=100)
    plt.close(fig)


def _plot_curves(task_name: str, rows: list[dict], keys: list[str], out_dir: Path) -> None:
    """Training-log ``keys`` over steps, one line per arm (mean over seeds), one panel per key."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.5), squeeze=False)
    for arm in dict.fromkeys(r["arm"] for r in rows):
        runs = [r for r in rows if r["arm"] == arm and r.get("train_log")]
        for ax, key in zip(axes[0], keys):
            series = [dict(train_log_series(r, key)) for r in runs]
            steps = sorted(set().union(*series)) if series else []
            if not steps:
                continue
            with warnings.catch_warnings():  # a step some seed did not log is NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean([[s.get(step, np.nan) for step in steps] for s in series], axis=0)
            ax.plot(steps, mean, marker=".", label=arm)
    for ax, key in zip(axes[0], keys):
        ax.set(title=key, xlabel="step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.suptitle(f"{task_name}: training metrics (mean over seeds)")
    fig.tight_layout()
    fig.savefig(out_dir / f"{task_name}_training.png", dpi=100)
    plt.close(fig)


def _expand_arm_sets(study: Study, arms: list[str], tasks: list[str] | None, out_dir: Path) -> list[str]:
    selected = list(tasks or study.tasks)
    if len(selected) != 1:
        raise ValueError(
            f"An arm set ({sorted(study.arm_sets)}) is picked from one task's runs: give exactly one task with --tasks "
            f"(got {selected})."
        )
    expanded = []
    for name in arms:
        expanded += study.arm_sets[name](out_dir, selected[0]) if name in study.arm_sets else [name]
    return expanded


def run_study(
    study: Study,
    out_dir: str | os.PathLike,
    tasks: list[str] | None = None,
    arms: list[str] | None = None,
    seeds: list[int] | None = None,
    sizes: StudySizes | None = None,
    quick: bool = False,
    command: str = "",
    log: Callable[[str], None] = print,
    setting: str | None = None,
    reward: str | None = None,
    base_model: str | None = None,
) -> list[dict]:
    """Run (or resume) ``study``; returns the results of every selected run, after writing the table and plots.

    ``setting`` names one of ``study.settings``: its sizes are the default ``sizes`` and its config is merged over
    every training arm's. An entry of ``tasks`` may be a dataset name instead of one of the study's tasks
    (`trl_rlvr_ext.studies.user_tasks`; ``reward`` and ``base_model`` are for those)."""
    if setting is not None:
        study.get_setting(setting)  # an unknown name fails before anything runs
    if tasks or reward or base_model:
        from .user_tasks import with_dataset_tasks

        study, tasks = with_dataset_tasks(study, list(tasks or []), reward=reward, base_model=base_model)
    if arms and any(name in study.arm_sets for name in arms):
        arms = _expand_arm_sets(study, arms, tasks, Path(out_dir))
    for kind, chosen, known in (("task", tasks, study.tasks), ("arm", arms, study.arms)):
        unknown = sorted(set(chosen or []) - set(known))
        if unknown:
            raise ValueError(f"Unknown {kind}(s) {unknown} for study {study.name!r}: choose from {sorted(known)}.")
    declared_tasks = study.get_setting(setting).tasks if setting is not None else ()
    if declared_tasks and set(tasks or study.tasks) - set(declared_tasks):
        raise ValueError(
            f"Setting {setting!r} is declared for task(s) {list(declared_tasks)} only: add --tasks "
            f"{','.join(declared_tasks)}."
        )
    order = list(arms or study.default_arms(setting))
    for name in order:
        declared = study.arms[name].settings
        if declared and setting not in declared:
            where = "without a setting" if setting is None else f"in setting {setting!r}"
            raise ValueError(
                f"Arm {name!r} runs only in setting(s) {list(declared)}, not {where}: add --setting {declared[0]}."
            )
    for index, name in enumerate(order):
        source = study.arms[name].same_updates_as or study.arms[name].same_prompts_as
        if source and source in order[index:]:  # its budget must be known before it starts
            raise ValueError(f"Arm {name!r} matches the budget of {source!r}: list {source!r} before it.")
    seeds = [0, 1, 2] if seeds is None else list(seeds)
    if not seeds:
        raise ValueError("No seeds: give at least one.")
    for kind, chosen in (("task", tasks), ("arm", arms), ("seed", seeds)):
        repeated = sorted({str(c) for c in chosen or [] if list(chosen).count(c) > 1})
        if repeated:  # a repeated name would count the same run twice in the table's mean and sd
            raise ValueError(f"{kind.capitalize()}(s) {repeated} given more than once: name each once.")
    sizes = sizes or study.default_sizes(quick, setting)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for task_name in tasks or list(study.tasks):
        # seed by seed, so that an interrupted study has every arm at its first seeds
        for seed in seeds:
            for arm_name in order:
                done = (out / task_name / arm_name / f"seed{seed}" / "result.json").is_file()
                log(f"[{study.name}] {task_name} / {arm_name} / seed {seed}: {'done, loading' if done else 'running'}")
                run = study.run_one or run_one
                arm = study.arm_in_setting(study.arms[arm_name], setting)
                # only a setting's run gets the keyword (a study's own run_one need not know of settings)
                where = {} if setting is None else {"setting": setting}
                result = run(study, study.tasks[task_name], arm, seed, out, sizes, quick, command, **where)
                if not done:
                    log(f"    pass@1 {result['pass_at_k']['1']:.3f}, wall {result['wall_seconds']:.0f} s")
                results.append(result)
    summarize(study, results, out)
    log(f"[{study.name}] table: {out / 'results.md'}")
    return results
