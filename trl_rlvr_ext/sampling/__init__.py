"""The sampling layer: `SamplingSettings`, the `GenerationBackend` protocol and its backends (transformers, vLLM, a
trainer's vLLM engine), TRL-style grading, and `sample_and_grade`, the one generate-and-grade loop that Pass@k
evaluation, offline curation and the toy evaluation share.

It sits below the toy, evaluation and curation (see CONTRIBUTING.md): it imports no other part of the package.
"""

from .backends import (
    TrainerVLLMBackend,
    TransformersBackend,
    VLLMBackend,
    completion_in_format,
    decode_completions,
    eos_token_ids_of,
    is_conversational_prompt,
    load_model_and_tokenizer,
    make_backend,
    render_prompt_ids,
    truncate_at_eos,
)
from .grading import GradedSamples, as_reward_func_list, call_reward_func, grade, reward_func_name, sample_and_grade
from .settings import (
    NOT_GIVEN,
    GenerationBackend,
    SamplingSettings,
    ScoringBackend,
    sampling_from_deprecated_keywords,
    sampling_from_keywords,
)


__all__ = [
    "NOT_GIVEN",
    "GenerationBackend",
    "GradedSamples",
    "SamplingSettings",
    "ScoringBackend",
    "TrainerVLLMBackend",
    "TransformersBackend",
    "VLLMBackend",
    "as_reward_func_list",
    "call_reward_func",
    "completion_in_format",
    "decode_completions",
    "eos_token_ids_of",
    "grade",
    "is_conversational_prompt",
    "load_model_and_tokenizer",
    "make_backend",
    "render_prompt_ids",
    "reward_func_name",
    "sample_and_grade",
    "sampling_from_deprecated_keywords",
    "sampling_from_keywords",
    "truncate_at_eos",
]
