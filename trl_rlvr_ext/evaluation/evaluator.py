"""Pass@k evaluation: ``n`` samples per problem, graded by reward functions; unbiased pass@k, pass^k and maj@k for
k = 1, 2, 4, ..., n, with bootstrap confidence intervals over problems."""

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from ..sampling import (
    NOT_GIVEN,
    GenerationBackend,
    SamplingSettings,
    as_reward_func_list,
    load_model_and_tokenizer,
    make_backend,
    sample_and_grade,
    sampling_from_deprecated_keywords,
)
from .answers import extract_answers, resolve_answer_extractor
from .estimators import answer_classes, pass_metrics


@dataclass
class PassAtKResult:
    """Per-problem counts and the pass@k, pass^k and maj@k curves of one model, with their confidence intervals.

    Attributes:
        label: the name of the curve (a model path, a checkpoint, ...).
        num_samples: ``n`` per problem.
        num_correct: ``c`` per problem.
        pass_at_k: mean pass@k over problems, for each reported ``k``.
        config: the sampling settings, recorded with the results.
        pass_hat_k: mean pass^k (all ``k`` correct) over problems, for each reported ``k``.
        maj_at_k: mean maj@k over problems, for each reported ``k``; `None` when no answers were extracted.
        answer_classes: per problem, ``[(n_a, c_a), ...]`` over its distinct extracted answers (see
            `trl_rlvr_ext.evaluation.answer_classes`); `None` when no answers were extracted.
        intervals: ``(low, high)`` bootstrap confidence interval of each metric, keyed ``"pass@<k>"``, ``"pass^<k>"``,
            ``"maj@<k>"``; empty when none were computed (and in files written before they existed).
    """

    label: str
    num_samples: np.ndarray
    num_correct: np.ndarray
    pass_at_k: dict[int, float]
    config: dict = field(default_factory=dict)
    pass_hat_k: dict[int, float] = field(default_factory=dict)
    maj_at_k: dict[int, float] | None = None
    answer_classes: list[list[tuple[int, int]]] | None = None
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def from_counts(
        cls,
        label: str,
        num_samples,
        num_correct,
        ks: Sequence[int] | None = None,
        answer_classes: Sequence[Sequence[tuple[int, int]]] | None = None,
        confidence_level: float | None = 0.95,
        bootstrap_resamples: int = 1000,
        seed: int = 0,
        config: dict | None = None,
    ) -> "PassAtKResult":
        """Every metric from per-problem counts (and answer classes, for maj@k), with bootstrap intervals over problems
        (see `trl_rlvr_ext.evaluation.pass_metrics`); the interval settings are recorded in ``config``."""
        n = np.asarray(num_samples, dtype=np.int64)
        c = np.asarray(num_correct, dtype=np.int64)
        classes = None if answer_classes is None else [[(int(a), int(b)) for a, b in p] for p in answer_classes]
        values, intervals = pass_metrics(
            n, c, ks, classes, confidence_level=confidence_level, num_resamples=bootstrap_resamples, seed=seed
        )
        config = dict(config or {})
        if confidence_level is not None:
            config.update(
                confidence_level=confidence_level, bootstrap_resamples=bootstrap_resamples, bootstrap_seed=seed
            )

        def family(prefix):
            return {int(name[len(prefix) :]): v for name, v in values.items() if name.startswith(prefix)}

        return cls(
            label=str(label),
            num_samples=n,
            num_correct=c,
            pass_at_k=family("pass@"),
            config=config,
            pass_hat_k=family("pass^"),
            maj_at_k=None if classes is None else family("maj@"),
            answer_classes=classes,
            intervals=intervals,
        )

    def to_dict(self) -> dict:
        data = {
            "label": self.label,
            "num_problems": len(self.num_samples),
            "pass_at_k": {f"pass@{k}": v for k, v in self.pass_at_k.items()},
            "pass_hat_k": {f"pass^{k}": v for k, v in self.pass_hat_k.items()},
        }
        if self.maj_at_k is not None:
            data["maj_at_k"] = {f"maj@{k}": v for k, v in self.maj_at_k.items()}
        data["intervals"] = {name: [low, high] for name, (low, high) in self.intervals.items()}
        data["num_samples"] = self.num_samples.tolist()
        data["num_correct"] = self.num_correct.tolist()
        if self.answer_classes is not None:
            data["answer_classes"] = [[[size, correct] for size, correct in p] for p in self.answer_classes]
        data["config"] = self.config
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "PassAtKResult":
        """A result from `to_dict`'s output; files written before pass^k, maj@k and intervals existed load too."""

        def by_k(block):
            return {int(key.split("@" if "@" in key else "^")[1]): float(v) for key, v in block.items()}

        classes = data.get("answer_classes")
        return cls(
            label=data["label"],
            num_samples=np.asarray(data["num_samples"], dtype=np.int64),
            num_correct=np.asarray(data["num_correct"], dtype=np.int64),
            pass_at_k=by_k(data["pass_at_k"]),
            config=data.get("config", {}),
            pass_hat_k=by_k(data.get("pass_hat_k", {})),
            maj_at_k=by_k(data["maj_at_k"]) if "maj_at_k" in data else None,
            answer_classes=None if classes is None else [[(int(a), int(b)) for a, b in p] for p in classes],
            intervals={name: (float(low), float(high)) for name, (low, high) in data.get("intervals", {}).items()},
        )


def count_correct(
    backend: GenerationBackend,
    tokenizer,
    rows: Sequence[dict],
    reward_funcs: Sequence[Callable],
    sampling: SamplingSettings,
    *,
    correct_threshold: float = 1.0,
    problems_per_batch: int = 64,
    progress: bool = False,
) -> np.ndarray:
    """Number of correct samples among ``sampling.num_samples`` for each dataset row (a dict with ``prompt`` and the
    columns the reward functions read). Problems are processed ``problems_per_batch`` at a time; batch ``b`` samples
    with seed ``sampling.seed + b``, so the counts do not depend on how many batches ran before."""
    counts, _ = count_outcomes(
        backend,
        tokenizer,
        rows,
        reward_funcs,
        sampling,
        correct_threshold=correct_threshold,
        problems_per_batch=problems_per_batch,
        progress=progress,
    )
    return counts


def count_outcomes(
    backend: GenerationBackend,
    tokenizer,
    rows: Sequence[dict],
    reward_funcs: Sequence[Callable],
    sampling: SamplingSettings,
    *,
    correct_threshold: float = 1.0,
    problems_per_batch: int = 64,
    progress: bool = False,
    answer_extractor: Callable[[str], str | None] | None = None,
) -> tuple[np.ndarray, list[list[tuple[int, int]]] | None]:
    """`count_correct`, plus each row's answer classes ``[(n_a, c_a), ...]`` for maj@k when ``answer_extractor`` is
    given (else `None`). Returns ``(counts, answer_classes)``."""
    counts = np.zeros(len(rows), dtype=np.int64)
    classes: list[list[tuple[int, int]]] | None = None if answer_extractor is None else [[] for _ in rows]
    starts = range(0, len(rows), problems_per_batch)
    for b, start in enumerate(tqdm(starts, desc="Pass@k", disable=not progress)):
        batch = rows[start : start + problems_per_batch]
        graded = sample_and_grade(backend, tokenizer, batch, reward_funcs, sampling.offset_seed(b), correct_threshold)
        counts[start : start + len(batch)] = graded.correct.sum(axis=1)
        if classes is not None:
            answers = extract_answers(answer_extractor, graded.completions)
            n = sampling.num_samples
            for offset, row_correct in enumerate(graded.correct):
                row_answers = answers[offset * n : (offset + 1) * n]
                classes[start + offset] = answer_classes(row_answers, row_correct.tolist())
    return counts, classes


# `evaluate_pass_at_k`'s sampling settings when none are given (the SELF paper evaluates at temperature 0.6 and top-p
# 0.95, https://huggingface.co/papers/2510.02230); the former loose keywords' defaults, so a call without settings
# draws what it drew before they were grouped.
DEFAULT_EVALUATION_SAMPLING = SamplingSettings(
    num_samples=16, temperature=0.6, top_p=0.95, max_new_tokens=1024, seed=0
)


def evaluate_pass_at_k(
    model,
    dataset,
    reward_funcs: Callable | Sequence[Callable],
    tokenizer=None,
    num_samples: int = NOT_GIVEN,
    ks: Sequence[int] | None = None,
    temperature: float = NOT_GIVEN,
    top_p: float = NOT_GIVEN,
    max_new_tokens: int = NOT_GIVEN,
    correct_threshold: float = 1.0,
    batch_size: int = 64,
    use_vllm: bool = False,
    vllm_kwargs: dict | None = None,
    seed: int | None = NOT_GIVEN,
    num_problems: int | None = None,
    label: str | None = None,
    progress: bool = True,
    answer_extractor="auto",
    confidence_level: float | None = 0.95,
    bootstrap_resamples: int = 1000,
    sampling: SamplingSettings | None = None,
) -> PassAtKResult:
    r"""
    Sample ``sampling.num_samples`` completions per problem, grade them, and compute the unbiased pass@k, pass^k and
    (with an answer extractor) maj@k curves, with percentile-bootstrap confidence intervals over problems.

    The sampling settings are one value, ``sampling=SamplingSettings(...)``. The former loose keywords
    (``num_samples``, ``temperature``, ``top_p``, ``max_new_tokens``, ``seed``) are still accepted, with a
    `FutureWarning`, and will be removed.

    Args:
        model (`str` or `PreTrainedModel`):
            A model path / hub id (loaded here, or by vLLM), or a loaded causal LM.
        dataset (`datasets.Dataset` or list of dicts):
            Problems with a ``prompt`` column (standard or conversational) and the columns the reward functions read
            (e.g. ``solution`` for `trl.rewards.accuracy_reward`).
        reward_funcs (callable or list of callables):
            TRL-style reward functions. A sample is correct when every one returns at least ``correct_threshold``.
        tokenizer: the tokenizer (loaded from ``model`` when it is a path and this is `None`).
        num_samples: deprecated, use ``sampling=SamplingSettings(num_samples=...)`` (``n``, samples per problem).
        ks: the k's to report (default 1, 2, 4, ..., n).
        temperature, top_p: deprecated, use ``sampling=SamplingSettings(temperature=..., top_p=...)``.
        max_new_tokens: deprecated, use ``sampling=SamplingSettings(max_new_tokens=...)``.
        correct_threshold: the reward that counts as correct.
        batch_size: sequences per ``generate`` call (problems per batch =
            ``max(1, batch_size // sampling.num_samples)``).
        use_vllm: generate with vLLM (installed separately; ``model`` must then be a path or hub id).
        vllm_kwargs: arguments for `vllm.LLM`.
        seed: deprecated, use ``sampling=SamplingSettings(seed=...)``.
        num_problems: evaluate only the first ``num_problems`` problems.
        label: the curve's name (default: the model path or class name).
        progress: show progress bars.
        answer_extractor: how to read each sample's answer for maj@k: ``"auto"`` (from the reward functions: the toy
            reward, our math reward and TRL's ``accuracy_reward`` have extractors; other rewards get no maj@k),
            ``"toy"``, ``"math"`` (math-verify), a callable ``text -> str | None``, or `None` (no maj@k).
        confidence_level: level of the bootstrap intervals over problems (`None`: no intervals).
        bootstrap_resamples: bootstrap resamples (seeded with the sampling seed).
        sampling (`trl_rlvr_ext.sampling.SamplingSettings`, *optional*):
            How completions are drawn: ``num_samples`` (``n``, samples per problem), ``temperature``, ``top_p``,
            ``max_new_tokens`` (the generation budget per sample), ``greedy`` and ``seed`` (the caller's RNG is left
            untouched). Defaults to `DEFAULT_EVALUATION_SAMPLING`: 16 samples at temperature 0.6 and top-p 0.95 (the
            SELF paper's, https://huggingface.co/papers/2510.02230), 1024 new tokens, seed 0. Its seed also seeds the
            bootstrap (0 when it is `None`). Giving it together with a deprecated loose keyword is an error.

    Returns:
        [`PassAtKResult`].
    """
    reward_funcs = as_reward_func_list(reward_funcs)
    loose = {
        "num_samples": num_samples,
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
    }
    sampling = sampling_from_deprecated_keywords(sampling, evaluate_pass_at_k, DEFAULT_EVALUATION_SAMPLING, loose)
    num_samples = sampling.num_samples
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
    model, tokenizer = load_model_and_tokenizer(model, tokenizer, use_vllm)
    extractor = resolve_answer_extractor(answer_extractor, reward_funcs)
    backend = make_backend(model, tokenizer, use_vllm, batch_size, progress=False, vllm_kwargs=vllm_kwargs)
    counts, classes = count_outcomes(
        backend,
        tokenizer,
        rows,
        reward_funcs,
        sampling,
        correct_threshold=correct_threshold,
        problems_per_batch=max(1, batch_size // num_samples),
        progress=progress,
        answer_extractor=extractor,
    )
    n = np.full(len(rows), num_samples, dtype=np.int64)
    config = {
        "num_samples": num_samples,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_new_tokens": sampling.max_new_tokens,
        "correct_threshold": correct_threshold,
        "seed": sampling.seed,
        "backend": "vllm" if use_vllm else "transformers",
    }
    if sampling.greedy:
        config["greedy"] = True
    if extractor is not None:
        config["answer_extractor"] = getattr(extractor, "__name__", type(extractor).__name__)
    return PassAtKResult.from_counts(
        label,
        n,
        counts,
        ks,
        classes,
        confidence_level=confidence_level,
        bootstrap_resamples=bootstrap_resamples,
        seed=0 if sampling.seed is None else sampling.seed,
        config=config,
    )


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
