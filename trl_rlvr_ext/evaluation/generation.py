"""Reward functions by name for evaluation, and the old home of the sampling layer.

The backends, grading and the generate-and-grade loop live in `trl_rlvr_ext.sampling` (below the toy, evaluation and
curation, which all use them); the names are re-exported here so that imports from
``trl_rlvr_ext.evaluation.generation`` keep working.
"""

from collections.abc import Callable, Sequence

from ..sampling import (
    GenerationBackend,
    SamplingSettings,
    TrainerVLLMBackend,
    TransformersBackend,
    VLLMBackend,
    call_reward_func,
    decode_completions,
    eos_token_ids_of,
    grade,
    is_conversational_prompt,
    make_backend,
    render_prompt_ids,
    reward_func_name,
    sample_and_grade,
    truncate_at_eos,
)


__all__ = [
    "GenerationBackend",
    "SamplingSettings",
    "TrainerVLLMBackend",
    "TransformersBackend",
    "VLLMBackend",
    "call_reward_func",
    "decode_completions",
    "eos_token_ids_of",
    "grade",
    "is_conversational_prompt",
    "make_backend",
    "render_prompt_ids",
    "resolve_reward_funcs",
    "reward_func_name",
    "sample_and_grade",
    "truncate_at_eos",
]


def resolve_reward_funcs(names: Sequence[str]) -> list[Callable]:
    """Reward functions from names (see `trl_rlvr_ext.rewards.REWARD_NAMES`) or import paths ``pkg.module.func``."""
    from ..rewards import get_reward_func

    return [get_reward_func(name) for name in names]
