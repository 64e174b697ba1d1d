"""Pass@k evaluation: ``n`` samples per problem, graded by reward functions, unbiased pass@k for k = 1, 2, 4, ..., n."""

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from .generation import make_backend, sample_and_grade
from .pass_at_k import curve_from_counts


@dataclass
class PassAtKResult:
    """Per-problem counts and the pass@k curve of one model.

    Attributes:
        label: the name of the curve (a model path, a checkpoint, ...).
        num_samples: ``n`` per problem.
        num_correct: ``c`` per problem.
        pass_at_k: mean pass@k over problems, for each reported ``k``.
        config: the sampling settings, recorded with the results.
    """

    label: str
    num_samples: np.ndarray
    num_correct: np.ndarray
    pass_at_k: dict[int, float]
    config: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "num_problems": len(self.num_samples),
            "pass_at_k": {f"pass@{k}": v for k, v in self.pass_at_k.items()},
            "num_samples": self.num_samples.tolist(),
            "num_correct": self.num_correct.tolist(),
            "config": self.config,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "PassAtKResult":
        return cls(
            label=data["label"],
            num_samples=np.asarray(data["num_samples"], dtype=np.int64),
            num_correct=np.asarray(data["num_correct"], dtype=np.int64),
            pass_at_k={int(key.split("@")[1]): float(v) for key, v in data["pass_at_k"].items()},
            config=data.get("config", {}),
        )


def count_correct(
    backend,
    tokenizer,
    rows: Sequence[dict],
    reward_funcs: Sequence[Callable],
    num_samples: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    correct_threshold: float = 1.0,
    problems_per_batch: int = 64,
    seed: int | None = 0,
    progress: bool = False,
) -> np.ndarray:
    """Number of correct samples among ``num_samples`` for each dataset row (a dict with ``prompt`` and the columns
    the reward functions read). Problems are processed ``problems_per_batch`` at a time; batch ``b`` samples with
    seed ``seed + b``, so the counts do not depend on how many batches ran before."""
    counts = np.zeros(len(rows), dtype=np.int64)
    starts = range(0, len(rows), problems_per_batch)
    for b, start in enumerate(tqdm(starts, desc="Pass@k", disable=not progress)):
        batch = rows[start : start + problems_per_batch]
        _, _, correct = sample_and_grade(
            backend,
            tokenizer,
            batch,
            reward_funcs,
            num_samples,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            correct_threshold=correct_threshold,
            seed=None if seed is None else seed + b,
        )
        counts[start : start + len(batch)] = correct.sum(axis=1)
    return counts


def evaluate_pass_at_k(
    model,
    dataset,
    reward_funcs: Callable | Sequence[Callable],
    tokenizer=None,
    num_samples: int = 16,
    ks: Sequence[int] | None = None,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_new_tokens: int = 1024,
    correct_threshold: float = 1.0,
    batch_size: int = 64,
    use_vllm: bool = False,
    vllm_kwargs: dict | None = None,
    seed: int = 0,
    num_problems: int | None = None,
    label: str | None = None,
    progress: bool = True,
) -> PassAtKResult:
    r"""
    Sample ``num_samples`` completions per problem, grade them, and compute the unbiased pass@k curve.

    Args:
        model (`str` or `PreTrainedModel`):
            A model path / hub id (loaded here, or by vLLM), or a loaded causal LM.
        dataset (`datasets.Dataset` or list of dicts):
            Problems with a ``prompt`` column (standard or conversational) and the columns the reward functions read
            (e.g. ``solution`` for `trl.rewards.accuracy_reward`).
        reward_funcs (callable or list of callables):
            TRL-style reward functions. A sample is correct when every one returns at least ``correct_threshold``.
        tokenizer: the tokenizer (loaded from ``model`` when it is a path and this is `None`).
        num_samples: ``n``, samples per problem.
        ks: the k's to report (default 1, 2, 4, ..., n).
        temperature, top_p: sampling settings (the SELF paper evaluates at 0.6 and 0.95,
            https://huggingface.co/papers/2510.02230).
        max_new_tokens: generation budget per sample.
        correct_threshold: the reward that counts as correct.
        batch_size: sequences per ``generate`` call (problems per batch = ``max(1, batch_size // num_samples)``).
        use_vllm: generate with vLLM (installed separately; ``model`` must then be a path or hub id).
        vllm_kwargs: arguments for `vllm.LLM`.
        seed: sampling seed (the caller's RNG is left untouched).
        num_problems: evaluate only the first ``num_problems`` problems.
        label: the curve's name (default: the model path or class name).
        progress: show progress bars.

    Returns:
        [`PassAtKResult`].
    """
    if callable(reward_funcs) and not isinstance(reward_funcs, (list, tuple)):
        reward_funcs = [reward_funcs]
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}.")
    if ks is not None and max(ks) > num_samples:
        raise ValueError(f"ks={list(ks)} asks for k > num_samples={num_samples}; sample more or drop those k.")
    rows = [dict(row) for row in dataset]
    if num_problems is not None:
        rows = rows[:num_problems]
    if not rows:
        raise ValueError("The dataset is empty.")
    if "prompt" not in rows[0]:
        raise ValueError(f"The dataset needs a 'prompt' column, got columns {sorted(rows[0])}.")
    if label is None:
        label = model if isinstance(model, str) else getattr(model, "name_or_path", type(model).__name__)
    if tokenizer is None:
        if not isinstance(model, (str, os.PathLike)):
            raise ValueError("Pass the tokenizer when `model` is a loaded model.")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
    if isinstance(model, (str, os.PathLike)) and not use_vllm:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model)
    backend = make_backend(model, tokenizer, use_vllm, batch_size, progress=False, vllm_kwargs=vllm_kwargs)
    counts = count_correct(
        backend,
        tokenizer,
        rows,
        reward_funcs,
        num_samples,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        correct_threshold=correct_threshold,
        problems_per_batch=max(1, batch_size // num_samples),
        seed=seed,
        progress=progress,
    )
    n = np.full(len(rows), num_samples, dtype=np.int64)
    config = {
        "num_samples": num_samples,
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "correct_threshold": correct_threshold,
        "seed": seed,
        "backend": "vllm" if use_vllm else "transformers",
    }
    return PassAtKResult(str(label), n, counts, curve_from_counts(n, counts, ks), config)


def save_results(results: Sequence[PassAtKResult], path: str) -> str:
    """Write results (one per model) to a JSON file; returns the path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"results": [r.to_dict() for r in results]}, f, indent=2)
    return path


def load_results(path: str) -> list[PassAtKResult]:
    """Read results written by `save_results`."""
    with open(path) as f:
        return [PassAtKResult.from_dict(d) for d in json.load(f)["results"]]
