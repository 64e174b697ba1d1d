"""LoRA initialisers for RL: RLPO, RLMO (https://huggingface.co/papers/2606.31813), PiSSA and MiLoRA.

One entry point, ``get_peft_model_with_init(model, lora_config, method, **options) -> PeftModel``; ``init_lora``
re-initialises an existing adapter in place. The trainers call ``prepare_model_for_trainer`` when their config sets
``lora_init``. See docs/methods/lora_init.md.
"""

from .api import LoraInitInfo, get_lora_init_info, get_peft_model_with_init, init_lora
from .decomposition import bottom_singular_triplets, principal_angle_error, top_singular_triplets
from .integration import PreparedModel, check_lora_init_args, prepare_model_for_trainer
from .methods import LoraFactors, lora_factors
from .options import METHODS, check_method, check_options, supported_methods
from .saving import (
    CONVERTED_ADAPTER_DIRNAME,
    INITIAL_ADAPTER_DIRNAME,
    LoraInitCallback,
    save_converted_adapter,
    save_initial_adapter,
)


__all__ = [
    "CONVERTED_ADAPTER_DIRNAME",
    "INITIAL_ADAPTER_DIRNAME",
    "METHODS",
    "LoraFactors",
    "LoraInitCallback",
    "LoraInitInfo",
    "PreparedModel",
    "bottom_singular_triplets",
    "check_lora_init_args",
    "check_method",
    "check_options",
    "get_lora_init_info",
    "get_peft_model_with_init",
    "init_lora",
    "lora_factors",
    "prepare_model_for_trainer",
    "principal_angle_error",
    "save_converted_adapter",
    "save_initial_adapter",
    "supported_methods",
    "top_singular_triplets",
]
