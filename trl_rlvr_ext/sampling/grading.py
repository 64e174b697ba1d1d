"""Grading TRL-style, and the one generate-and-grade loop that evaluation, offline curation and the toy evaluation use.

Grading follows TRL's reward-function convention: ``f(prompts=, completions=, completion_ids=, **dataset_columns)``
returns one float (or ``None``) per completion, so the reward functions written for `GRPOTrainer` grade samples
unchanged.
"""

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from .backends import decode_completions, is_conversational_prompt, render_prompt_ids
from .settings import GenerationBackend, SamplingSettings


def as_reward_func_list(reward_funcs) -> list[Callable]:
    """One reward function or a sequence of them, as a list."""
    return [reward_funcs] if callable(reward_funcs) else list(reward_funcs)


def _noop(*args, **kwargs):
    return None


def reward_func_name(func) -> str:
    """The name TRL logs a reward function under (``rewards/<name>/mean``)."""
    if isinstance(func, torch.nn.Module):
        return func.config._name_or_path.split("/")[-1]
    return getattr(func, "__name__", type(func).__name__)


def call_reward_func(func, prompts, completions, completion_ids, columns: dict, trainer_state=None) -> np.ndarray:
    """One reward function on a batch, TRL-style; ``None`` rewards become NaN. Returns a float64 array."""
    if isinstance(func, torch.nn.Module):
        raise TypeError(
            f"{reward_func_name(func)!r} is a reward model; grading needs verifiable reward functions (callables that "
            "return a score per completion), such as `trl.rewards.accuracy_reward`."
        )
    kwargs = dict(columns)
    kwargs.update(trainer_state=trainer_state, log_extra=_noop, log_metric=_noop)
    call = dict(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
    if inspect.iscoroutinefunction(func):
        output = asyncio.run(func(**call))
    else:
        output = func(**call)
    if len(output) != len(completions):
        raise ValueError(
            f"The reward function {reward_func_name(func)!r} returned {len(output)} rewards for {len(completions)} "
            "completions; it must return exactly one per completion."
        )
    return np.array([np.nan if r is None else float(r) for r in output], dtype=np.float64)


def grade(
    reward_funcs: Sequence[Callable],
    prompts: Sequence,
    completions: Sequence,
    completion_ids: Sequence[Sequence[int]],
    columns: dict[str, list],
    threshold: float = 1.0,
) -> np.ndarray:
    """Correctness of each completion: every reward function returns at least ``threshold`` (a ``None`` fails)."""
    if not reward_funcs:
        raise ValueError("Grading needs at least one reward function.")
    correct = np.ones(len(completions), dtype=bool)
    for func in reward_funcs:
        rewards = call_reward_func(func, prompts, completions, completion_ids, columns)
        correct &= np.nan_to_num(rewards, nan=-np.inf) >= threshold
    return correct


class GradedSamples(NamedTuple):
    """What `sample_and_grade` drew and how it graded it, for ``R`` rows and ``n = sampling.num_samples``.

    Attributes:
        prompt_ids: the token ids of each row's prompt (``R`` lists).
        completion_ids: ``completion_ids[row][sample]``, cut after the first EOS.
        completions: the ``R * n`` decoded completions, row-major, in the format the reward functions saw (strings, or
            one assistant message for conversational prompts).
        correct: boolean array of shape ``(R, n)``.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[list[int]]]
    completions: list
    correct: np.ndarray


def sample_and_grade(
    backend: GenerationBackend,
    tokenizer,
    rows: Sequence[dict],
    reward_funcs: Sequence[Callable],
    sampling: SamplingSettings,
    correct_threshold: float = 1.0,
) -> GradedSamples:
    """Draw ``sampling.num_samples`` completions for each row (a dict with ``prompt`` and the reward functions'
    columns) and grade them: a completion is correct when every reward function gives at least
    ``correct_threshold``."""
    num_samples = sampling.num_samples
    prompts = [row["prompt"] for row in rows]
    prompt_ids = render_prompt_ids(tokenizer, prompts)
    sampled = backend.generate(prompt_ids, sampling)
    flat_ids = [ids for per_prompt in sampled for ids in per_prompt]
    flat_prompts = [p for p in prompts for _ in range(num_samples)]
    columns = {key: [row[key] for row in rows for _ in range(num_samples)] for key in rows[0] if key != "prompt"}
    completions = decode_completions(tokenizer, flat_ids, is_conversational_prompt(prompts[0]))
    correct = grade(reward_funcs, flat_prompts, completions, flat_ids, columns, correct_threshold)
    return GradedSamples(prompt_ids, sampled, completions, correct.reshape(len(rows), num_samples))
