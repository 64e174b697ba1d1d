"""The embedded default: an offline tiny model, its tokenizer, and a synthetic verifiable task."""

from .evaluate import evaluate_accuracy
from .modeling import SPECIAL_TOKENS, VLLM_SHAPE, make_model, make_tokenizer, save_tiny_model
from .size import SIZE_ENV_VAR, toy_size
from .task import make_task_datasets
from .warmstart import WarmStartSettings, get_base_model_path, is_base_model_cached


__all__ = [
    "SIZE_ENV_VAR",
    "SPECIAL_TOKENS",
    "VLLM_SHAPE",
    "WarmStartSettings",
    "evaluate_accuracy",
    "get_base_model_path",
    "is_base_model_cached",
    "make_model",
    "make_task_datasets",
    "make_tokenizer",
    "save_tiny_model",
    "toy_size",
]
