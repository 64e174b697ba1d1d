"""Offline curation: score every prompt of a dataset with a model, then filter by pass rate / greedy correctness.

For each prompt: ``k`` samples and one greedy decode, graded by the reward functions; the scores are

- ``pass_rate``: share of the ``k`` samples that are correct (``num_correct`` / ``num_samples``);
- ``greedy_correct``: whether the greedy answer is correct (SELF's criterion, https://huggingface.co/papers/2510.02230);
- ``correct_mean_logprob``: mean over the correct samples of their mean token log-likelihood under the model
  (``None`` when no sample is correct): low values mark problems whose correct solutions are unlikely.

The work is split into shards of ``shard_size`` prompts; each finished shard is written atomically (to a temporary
file, then renamed) under ``<output_dir>/shards/``. A rerun with the same settings loads the finished shards and
scores only the rest, so an interrupted run loses at most the shard in progress. Shard ``i`` samples with seed
``seed + i``: the results do not depend on where a run was interrupted.

Command line: ``trl-rlvr-ext curate --model M --dataset D --reward_funcs F --output_dir OUT [filters]``
(`trl_rlvr_ext.scripts.curate`).
"""

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
from tqdm.auto import tqdm

from .._io import atomic_write
from ..sampling import (
    SamplingSettings,
    ScoringBackend,
    as_reward_func_list,
    load_model_and_tokenizer,
    make_backend,
    sample_and_grade,
    sampling_from_keywords,
)


SCORE_COLUMNS = ("pass_rate", "num_correct", "num_samples", "greedy_correct", "correct_mean_logprob")
_META_FILE = "curate_meta.json"


class CurationSettingsError(ValueError):
    """``output_dir`` holds scores made with other settings; ``differences`` maps each setting that differs to
    ``(saved, requested)``."""

    def __init__(self, output_dir: str, differences: dict):
        self.output_dir = output_dir
        self.differences = differences
        shown = ", ".join(f"{key}: {saved!r} there, {new!r} now" for key, (saved, new) in differences.items())
        super().__init__(
            f"{output_dir} holds scores made with other settings ({shown}). Use a new output_dir (or delete this one) "
            "to start fresh, or the settings of the run that wrote it to resume."
        )


def _shard_path(output_dir: str, index: int) -> str:
    return os.path.join(output_dir, "shards", f"shard-{index:05d}.jsonl")


def score_rows(
    backend: ScoringBackend,
    tokenizer,
    rows: Sequence[dict],
    reward_funcs: Sequence[Callable],
    sampling: SamplingSettings,
    correct_threshold: float = 1.0,
) -> list[dict]:
    """Scores of each row (a dict with ``prompt`` and the reward functions' columns): ``sampling.num_samples``
    samples, then one greedy decode with the same budget; see the module docstring."""
    num_samples = sampling.num_samples
    prompt_ids, sampled, _, correct = sample_and_grade(
        backend, tokenizer, rows, reward_funcs, sampling, correct_threshold
    )
    greedy_correct = sample_and_grade(
        backend, tokenizer, rows, reward_funcs, sampling.as_greedy(), correct_threshold
    ).correct[:, 0]

    # log-likelihood of the correct samples only (the quantity SELF's analysis tracks)
    pairs = [(i, j) for i in range(len(rows)) for j in range(num_samples) if correct[i, j]]
    logprobs = (
        backend.mean_logprobs([prompt_ids[i] for i, _ in pairs], [sampled[i][j] for i, j in pairs]) if pairs else []
    )
    per_row: list[list[float]] = [[] for _ in rows]
    for (i, _), value in zip(pairs, logprobs):
        if not math.isnan(value):
            per_row[i].append(value)

    return [
        {
            "num_correct": int(correct[i].sum()),
            "num_samples": num_samples,
            "pass_rate": float(correct[i].mean()),
            "greedy_correct": bool(greedy_correct[i]),
            "correct_mean_logprob": float(np.mean(per_row[i])) if per_row[i] else None,
        }
        for i in range(len(rows))
    ]


def _score_shard(backend, tokenizer, rows, reward_funcs, sampling: SamplingSettings, correct_threshold, seed: int):
    return score_rows(backend, tokenizer, rows, reward_funcs, replace(sampling, seed=seed), correct_threshold)


def _write_atomically(path: str, lines: list[dict]) -> None:
    # atomic: a shard file is either absent or complete; synced to disk, since a lost shard costs its scoring again
    atomic_write(path, "".join(json.dumps(line) + "\n" for line in lines), fsync=True)


def score_dataset(
    model,
    dataset,
    reward_funcs: Callable | Sequence[Callable],
    output_dir: str,
    tokenizer=None,
    num_samples: int = 8,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 1024,
    correct_threshold: float = 1.0,
    shard_size: int = 256,
    batch_size: int = 64,
    use_vllm: bool = False,
    vllm_kwargs: dict | None = None,
    seed: int = 0,
    progress: bool = True,
    sampling: SamplingSettings | None = None,
):
    r"""
    Score every prompt of ``dataset`` with ``model``; resumable (see the module docstring).

    Args:
        model (`str` or `PreTrainedModel`): a path / hub id, or a loaded causal LM (not with ``use_vllm``).
        dataset (`datasets.Dataset`): prompts (``prompt`` column) and the reward functions' columns.
        reward_funcs: TRL-style reward functions; a sample is correct when each returns at least ``correct_threshold``.
        output_dir: where shards, the settings and the scored dataset are written.
        tokenizer: the tokenizer (loaded from ``model`` when it is a path).
        num_samples: ``k``, samples per prompt.
        temperature, top_p, max_new_tokens: sampling settings (the greedy decode uses ``max_new_tokens`` too).
        correct_threshold: the reward that counts as correct.
        shard_size: prompts per shard (the unit of work that an interruption can lose).
        batch_size: sequences per ``generate`` call.
        use_vllm: generate with vLLM (installed separately).
        vllm_kwargs: arguments for `vllm.LLM`.
        seed: base sampling seed (shard ``i`` uses ``seed + i``).
        progress: show a progress bar over shards.
        sampling (`trl_rlvr_ext.sampling.SamplingSettings`, *optional*): the sampling settings as one value, instead
            of ``num_samples``, ``temperature``, ``top_p``, ``max_new_tokens`` and ``seed`` (which must then keep their
            defaults: giving a setting both ways is an error). It must be seeded and must not be greedy (the greedy
            decode is always made, on top of the samples).

    Returns:
        `datasets.Dataset`: ``dataset`` with the columns ``pass_rate``, ``num_correct``, ``num_samples``,
        ``greedy_correct`` and ``correct_mean_logprob``, also saved to ``<output_dir>/scored`` (``save_to_disk``).
    """

    reward_funcs = as_reward_func_list(reward_funcs)
    sampling = sampling_from_keywords(
        sampling,
        score_dataset,
        locals(),
        needs_seed="shard i samples with seed + i, so that a resumed run draws what an uninterrupted one would; the "
        "greedy decode is made in addition to the samples",
    )
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1, got {shard_size}.")
    if "prompt" not in dataset.column_names:
        raise ValueError(f"The dataset needs a 'prompt' column, got {dataset.column_names}.")
    if clash := [c for c in SCORE_COLUMNS if c in dataset.column_names]:
        raise ValueError(f"The dataset already has the score columns {clash}; drop them before scoring.")
    settings = {
        "num_rows": len(dataset),
        "dataset_fingerprint": getattr(dataset, "_fingerprint", None),
        "model": model if isinstance(model, (str, os.PathLike)) else getattr(model, "name_or_path", None),
        "num_samples": sampling.num_samples,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_new_tokens": sampling.max_new_tokens,
        "correct_threshold": correct_threshold,
        "shard_size": shard_size,
        "seed": sampling.seed,
        "reward_funcs": [getattr(f, "__name__", type(f).__name__) for f in reward_funcs],
    }
    settings["model"] = None if settings["model"] is None else str(settings["model"])
    os.makedirs(os.path.join(output_dir, "shards"), exist_ok=True)
    meta_path = os.path.join(output_dir, _META_FILE)
    if os.path.isfile(meta_path):
        with open(meta_path) as f:
            saved = json.load(f)
        if saved != settings:
            changed = sorted(k for k in settings.keys() | saved.keys() if saved.get(k) != settings.get(k))
            raise CurationSettingsError(output_dir, {k: (saved.get(k), settings.get(k)) for k in changed})
    else:
        _write_atomically(meta_path, [settings])  # one JSON line
        with open(meta_path) as f:
            settings = json.loads(f.readline())

    num_shards = -(-len(dataset) // shard_size)
    todo = [i for i in range(num_shards) if not os.path.isfile(_shard_path(output_dir, i))]
    if todo:
        model, tokenizer = load_model_and_tokenizer(model, tokenizer, use_vllm)
        backend = make_backend(model, tokenizer, use_vllm, batch_size, vllm_kwargs=vllm_kwargs)
        bar = tqdm(total=num_shards, initial=num_shards - len(todo), desc="Scoring shards", disable=not progress)
        for i in todo:
            rows = [
                dict(row) for row in dataset.select(range(i * shard_size, min((i + 1) * shard_size, len(dataset))))
            ]
            scores = _score_shard(
                backend, tokenizer, rows, reward_funcs, sampling, settings["correct_threshold"], sampling.seed + i
            )
            _write_atomically(
                _shard_path(output_dir, i), [{"row": i * shard_size + j, **s} for j, s in enumerate(scores)]
            )
            bar.update(1)
        bar.close()

    scores = load_scores(output_dir, len(dataset), shard_size)
    scored = dataset
    for column in SCORE_COLUMNS:
        scored = scored.add_column(column, [s[column] for s in scores])
    scored.save_to_disk(os.path.join(output_dir, "scored"))
    return scored


def load_scores(output_dir: str, num_rows: int, shard_size: int) -> list[dict]:
    """The per-row scores of a finished run, in dataset order."""
    scores = []
    for i in range(-(-num_rows // shard_size)):
        with open(_shard_path(output_dir, i)) as f:
            scores.extend(json.loads(line) for line in f)
    if [s["row"] for s in scores] != list(range(num_rows)):
        raise RuntimeError(f"The shards in {output_dir} do not cover rows 0..{num_rows - 1} in order.")
    return scores


def filter_scored(
    scored,
    min_pass_rate: float | None = None,
    max_pass_rate: float | None = None,
    drop_greedy_correct: bool = False,
):
    """Keep the rows with ``min_pass_rate <= pass_rate <= max_pass_rate`` (bounds inclusive, ``None``: no bound) and,
    with ``drop_greedy_correct``, only those whose greedy answer is wrong (SELF's criterion, applied offline).

    With ``k`` samples, "0 < p < 1" is ``min_pass_rate=1/k, max_pass_rate=1-1/k``; open-r1 kept 0.1 <= p <= 0.6."""

    def keep(row):
        p = row["pass_rate"]
        if min_pass_rate is not None and p < min_pass_rate:
            return False
        if max_pass_rate is not None and p > max_pass_rate:
            return False
        return not (drop_greedy_correct and row["greedy_correct"])

    return scored.filter(keep)
