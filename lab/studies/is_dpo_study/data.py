"""The ``is_dpo`` study's preference data: built once per task from the base model's own samples, shared by every arm
and seed, written atomically.
"""

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from ..design import StudySizes, StudyTask
from ..run_inputs import base_model_path
from .design import _DATA_VERSION, DATA_PROMPTS, QUICK_DATA_PROMPTS


# ---------------------------------------------------------------- the preference data (once per task)
def _data_settings(task: StudyTask, sizes: StudySizes, quick: bool, base: dict | None = None) -> dict:
    return {
        "version": _DATA_VERSION,
        "dataset": task.dataset,
        "reward": task.reward,
        "base_model": base_model_path(task, quick, base),
        "num_prompts": QUICK_DATA_PROMPTS if quick else DATA_PROMPTS,
        "num_samples": sizes.num_generations,
        "temperature": 1.0,
        "max_new_tokens": task.max_completion_length,
        "seed": 0,
        "quick": quick,
    }


def build_preference_data(
    task: StudyTask, sizes: StudySizes, quick: bool, out_dir: Path, log=print, base: dict | None = None
):
    """The task's preference pairs with behaviour log-probs: built once under ``<out_dir>/<task>/_data/<key>/``
    (atomically: a finished build is exactly a directory with ``meta.json``), then loaded. Returns ``(dataset, meta)``.
    ``base`` overrides the base's warm start (`Setting.base`): the pairs are the samples of that base, under its own
    key."""
    settings = _data_settings(task, sizes, quick, base)
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    data_dir = out_dir / task.name / "_data" / key
    if (data_dir / "meta.json").is_file():
        return _load(data_dir)
    # Processes side by side (``study --workers``) may reach an unbuilt key together: one builds, the others wait and
    # load its build (without the lock a late builder would replace the folder another process is reading)
    from filelock import FileLock

    locks = out_dir / task.name / "_data_locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(str(locks / f"{key}.lock")):
        if (data_dir / "meta.json").is_file():
            return _load(data_dir)
        return _build(task, settings, quick, data_dir, log)


def _load(data_dir: Path):
    from datasets import load_from_disk

    return load_from_disk(str(data_dir / "pairs")), json.loads((data_dir / "meta.json").read_text())


def _build(task: StudyTask, settings: dict, quick: bool, data_dir: Path, log):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_rlvr_ext.data import load_named_dataset
    from trl_rlvr_ext.dpo.behavior import score_behavior_logps
    from trl_rlvr_ext.rewards import get_reward_func
    from trl_rlvr_ext.sampling import (
        SamplingSettings,
        TransformersBackend,
        as_reward_func_list,
        completion_in_format,
        is_conversational_prompt,
        sample_and_grade,
    )

    log(f"[is_dpo] {task.name}: building the preference data in {data_dir}")
    start = time.perf_counter()
    train = load_named_dataset(task.dataset)["train"]
    rows = [train[i] for i in range(min(settings["num_prompts"], train.num_rows))]
    tokenizer = AutoTokenizer.from_pretrained(settings["base_model"])
    model = AutoModelForCausalLM.from_pretrained(settings["base_model"])
    sampling = SamplingSettings(
        num_samples=settings["num_samples"],
        temperature=1.0,
        max_new_tokens=settings["max_new_tokens"],
        seed=settings["seed"],
    )
    backend = TransformersBackend(model, tokenizer, batch_size=256)
    graded = sample_and_grade(backend, tokenizer, rows, as_reward_func_list(get_reward_func(task.reward)), sampling)
    n = settings["num_samples"]
    pairs, from_gold = [], 0
    for index, row in enumerate(rows):
        correct = graded.correct[index].tolist()
        texts = graded.completions[index * n : (index + 1) * n]
        wrong = [text for text, ok in zip(texts, correct) if not ok]
        right = [text for text, ok in zip(texts, correct) if ok]
        if not wrong:
            continue
        if not right:
            if not quick:
                continue
            # in the prompt's format, as the sampled completions are (a chat prompt's: an assistant message)
            gold = completion_in_format(task.gold_completion(row), is_conversational_prompt(row["prompt"]))
            right, from_gold = [gold], from_gold + 1
        pairs.append({"prompt": row["prompt"], "chosen": right[0], "rejected": wrong[0]})
    if not pairs:
        raise RuntimeError(
            f"No preference pair for task {task.name!r}: no sampled prompt had both a correct and a wrong answer "
            f"among {n} samples. The base model {settings['base_model']} is too weak or too strong for this task."
        )
    pairs = score_behavior_logps(Dataset.from_list(pairs), model, tokenizer, batch_size=64, show_progress=False)
    per_prompt = graded.correct.mean(axis=1)
    meta = {
        "settings": settings,
        "num_pairs": len(pairs),
        "num_pairs_chosen_from_gold": from_gold,
        "prompts_all_correct": int((per_prompt == 1).sum()),
        "prompts_all_wrong": int((per_prompt == 0).sum()),
        "sample_accuracy": float(graded.correct.mean()),
        "build_seconds": round(time.perf_counter() - start, 1),
    }
    tmp = data_dir.with_name(data_dir.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pairs.save_to_disk(str(tmp / "pairs"))
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(data_dir, ignore_errors=True)  # a half-written build without meta.json
    os.replace(tmp, data_dir)
    log(f"[is_dpo] {task.name}: {len(pairs)} pairs from {len(rows)} prompts in {meta['build_seconds']:.0f} s")
    return _load(data_dir)
