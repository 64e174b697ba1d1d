"""The study runner: arms x seeds on tasks, Pass@k of every final model, a table and plots, resumable.

A *study* tests one claim. It names its tasks (`StudyTask`: a dataset, a reward, a base model), its arms (`Arm`: no
training, or `RLVRGRPOTrainer` with some options) and its sizes (`StudySizes`). `run_study` runs every
(task, arm, seed) not yet finished into ``<out_dir>/<task>/<arm>/seed<k>/result.json`` (written last, atomically:
a run is finished exactly when that file exists, so an interrupted study resumes where it stopped), then writes
``<out_dir>/results.md`` (mean ± sd over seeds) and, per task, ``<task>_pass_at_k.png`` and ``<task>_boundary.png``.

Each run records its wall time, the command that started the study and a command that reruns just that run. During
training a `BoundaryProbeCallback` follows the log-likelihood of correct held-out solutions (the gold completions of
the first ``probe_problems`` held-out problems). Evaluation samples at the task's temperature (1 unless the task says
otherwise: the policy's own distribution, as GRPO samples it) with the sampling seed ``1000 + seed``, so the base arm's spread over seeds is the evaluation
noise.
"""

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from trl_rlvr_ext._io import atomic_write

from .budgets import (  # noqa: F401  (re-exported: the runner's names, as before its split)
    generation_batches,
    prompts_trained,
    same_budget_arm,
    updates_made,
)
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
from .run_files import RunSpec, finished_result, result_path, run_dir
from .run_inputs import (  # noqa: F401  (re-exported: the runner's names, as before its split)
    RunInputs,
    base_model_path,
    common_training_settings,
    load_run_inputs,
    validation_split,
)
from .summary import (  # noqa: F401  (re-exported: the runner's names, as before its split)
    chance_pass_at_k,
    size_flags,
    summarize,
    trivial_row,
)


def _grpo_config(run_dir: Path, task: StudyTask, arm: Arm, sizes: StudySizes, seed: int, quick: bool = False):
    from trl_rlvr_ext.grpo.grpo_config import RLVRGRPOConfig

    settings = {
        **common_training_settings(run_dir, sizes, seed, quick),
        "loss_type": "dapo",
        "beta": 0.0,
        "num_generations": sizes.num_generations,
        "per_device_train_batch_size": sizes.num_prompts * sizes.num_generations // sizes.steps_per_generation,
        "steps_per_generation": sizes.steps_per_generation,
        "max_completion_length": task.max_completion_length,
        "temperature": task.temperature,
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
    from trl_rlvr_ext.evaluation.boundary import BoundaryProbeCallback

    if (done := finished_result(out_dir, task, arm, seed)) is not None:
        return done
    folder = run_dir(out_dir, task.name, arm.name, seed)
    folder.mkdir(parents=True, exist_ok=True)
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
    extrapolation = None
    if arm.extrapolate is not None:
        from .extrapolated import extrapolated_model

        source = study.arm_in_setting(study.arms[arm.extrapolate.source], setting)  # its config as it ran
        model, tokenizer, extrapolation = extrapolated_model(
            out_dir, task, arm, seed, base_path, folder, source_config=source.config
        )
    if arm.train:
        from transformers import AutoTokenizer

        from trl_rlvr_ext.grpo.grpo_trainer import RLVRGRPOTrainer

        args, config = _grpo_config(folder, task, arm, sizes, seed, quick)
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
            from trl_rlvr_ext.lora_init import get_lora_init_info

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
        **({"extrapolation": extrapolation} if extrapolation is not None else {}),
    }
    if precision != "trainer" and arm.train:
        extra["evaluated_precision"] = precision
    if base:
        extra["base_overrides"] = base
    if evaluated_on:  # the record's pass@k is not on the test problems: it says so
        extra["evaluated_on"] = evaluated_on
    result = evaluate_and_record(
        RunSpec(study, task, arm, seed, out_dir, sizes, quick, command, setting),
        model,
        tokenizer,
        test,
        reward,
        base_path=base_path,
        start=start,
        train_seconds=train_seconds,
        extra=extra,
    )
    return result


def evaluate_and_record(
    run: RunSpec,
    model,
    tokenizer,
    test,
    reward,
    *,
    base_path: str,
    start: float,
    train_seconds: float,
    extra: dict,
) -> dict:
    """The end of every run: the final model's unbiased Pass@k on the held-out problems (the task's temperature, 1
    unless it says otherwise; sampling seed ``1000 + seed``), then ``result.json`` (the keys the table reads, ``extra``, the wall time since ``start`` and a
    command that reruns just this run), written last and atomically."""
    import torch

    from trl_rlvr_ext.evaluation import evaluate_pass_at_k
    from trl_rlvr_ext.provenance import provenance
    from trl_rlvr_ext.sampling import SamplingSettings

    study, task, arm, seed, out_dir, sizes, quick, command, setting = (
        getattr(run, field.name) for field in dataclasses.fields(RunSpec)
    )

    sampling = SamplingSettings(
        num_samples=sizes.eval_samples,
        temperature=task.temperature,
        top_p=1.0,
        max_new_tokens=task.max_completion_length,
        seed=1000 + seed,
    )
    evaluation = evaluate_pass_at_k(
        model,
        test,
        reward,
        tokenizer=tokenizer,
        sampling=sampling,
        batch_size=max(256, 2 * sizes.eval_samples),
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
        # how the Pass@k samples were drawn (a DPO record has no GRPO config that would say the temperature)
        "evaluation_sampling": dataclasses.asdict(sampling),
        **extra,
        "sizes": dataclasses.asdict(sizes),
        "train_seconds": round(train_seconds, 1),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "command": command,
        # where the run came from, so that a design declared in a commit can be checked against its runs
        "provenance": provenance(base_path, torch.get_num_threads(), seed=seed),
        "rerun_command": f"{command.split(' --')[0]} --out_dir {out_dir} --tasks {task.selector or task.name} "
        f"--arms {arm.name} --seeds {seed}"
        + (f" --setting {setting}" if setting is not None else "")
        + (" --quick" if quick else "")
        + size_flags(study, sizes, quick, setting),
    }
    atomic_write(result_path(out_dir, task.name, arm.name, seed), json.dumps(result, indent=1, default=float))
    return result


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


@dataclasses.dataclass(frozen=True)
class StudyPlan:
    """What `run_study` will run, checked: the study (with any dataset tasks added), its tasks, arms (in run order,
    arm sets expanded) and seeds."""

    study: Study
    tasks: list[str]
    arms: list[str]
    seeds: list[int]


def _check_belongs(kind: str, name: str, declared: tuple[str, ...], setting: str | None) -> None:
    """An arm or task declared for some settings only (``declared``; empty: every one) fails outside them."""
    if declared and setting not in declared:
        where = "without a setting" if setting is None else f"in setting {setting!r}"
        raise ValueError(
            f"{kind} {name!r} runs only in setting(s) {list(declared)}, not {where}: add --setting {declared[0]}."
        )


def plan_study(
    study: Study,
    out_dir: str | os.PathLike,
    tasks: list[str] | None = None,
    arms: list[str] | None = None,
    seeds: list[int] | None = None,
    setting: str | None = None,
    reward: str | None = None,
    base_model: str | None = None,
) -> StudyPlan:
    """Check a selection of `run_study`'s arguments and return what it would run; every bad choice raises a
    ``ValueError`` naming the fix, before anything runs (``python -m lab study --workers N`` calls it before starting
    its processes, so that a typo fails once, in the parent, not in every worker)."""
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
    for name in tasks or []:
        _check_belongs("Task", name, study.tasks[name].settings, setting)
    tasks = list(tasks or study.default_tasks(setting))
    declared_tasks = study.get_setting(setting).tasks if setting is not None else ()
    if declared_tasks and set(tasks) - set(declared_tasks):
        raise ValueError(
            f"Setting {setting!r} is declared for task(s) {list(declared_tasks)} only: add --tasks "
            f"{','.join(declared_tasks)}."
        )
    order = list(arms or study.default_arms(setting))
    for name in order:
        _check_belongs("Arm", name, study.arms[name].settings, setting)
    for index, name in enumerate(order):
        source = study.arms[name].depends_on
        if source and source in order[index:]:  # its budget (or trajectory) must exist before it starts
            raise ValueError(f"Arm {name!r} needs the same-seed run of {source!r}: list {source!r} before it.")
    seeds = [0, 1, 2] if seeds is None else list(seeds)
    if not seeds:
        raise ValueError("No seeds: give at least one.")
    for kind, chosen in (("task", tasks), ("arm", arms), ("seed", seeds)):
        repeated = sorted({str(c) for c in chosen or [] if list(chosen).count(c) > 1})
        if repeated:  # a repeated name would count the same run twice in the table's mean and sd
            raise ValueError(f"{kind.capitalize()}(s) {repeated} given more than once: name each once.")
    return StudyPlan(study, tasks, order, seeds)


def _note_slow_bf16(study_name: str, log: Callable[[str], None]) -> None:
    """Say so where this CPU has no native bf16: the trained arms run TRL's default bf16 autocast, which torch then
    computes through a generic loop, several times slower than float32 (bench/RESULTS.md), so the runs take far longer
    than the wall times of records made on a CPU with it (each record's ``provenance.cpu`` says which)."""
    from trl_rlvr_ext.provenance import cpu_info

    cpu = cpu_info()
    if cpu["bf16"] is False:
        log(
            f"[{study_name}] note: this CPU ({cpu['model']}) has no native bf16 (avx512_bf16 or amx_bf16); the "
            "trained arms run in TRL's default bf16 autocast, which is several times slower here than on a CPU with "
            "it (bench/RESULTS.md). The arithmetic is the same, up to the order of the sums."
        )


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
    (`lab.studies.user_tasks`; ``reward`` and ``base_model`` are for those). The selection is checked first
    (`plan_study`)."""
    plan = plan_study(study, out_dir, tasks, arms, seeds, setting=setting, reward=reward, base_model=base_model)
    study, order, seeds = plan.study, plan.arms, plan.seeds
    sizes = sizes or study.default_sizes(quick, setting)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not quick and any(study.arms[name].train for name in order):
        _note_slow_bf16(study.name, log)
    results = []
    for task_name in plan.tasks:
        # seed by seed, so that an interrupted study has every arm at its first seeds
        for seed in seeds:
            for arm_name in order:
                done = result_path(out, task_name, arm_name, seed).is_file()
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
