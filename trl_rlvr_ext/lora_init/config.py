"""The `lora_init` configuration fields, shared by `RLVRGRPOConfig` and `ISDPOConfig` (one definition, one check)."""

import json
from dataclasses import dataclass, field


@dataclass
class LoraInitArguments:
    """Mixin of the LoRA-initialiser fields. Put it *before* the TRL config in the bases, so that TRL's fields (and
    positional `output_dir`) keep their order and these come after them."""

    lora_init: str | None = field(
        default=None,
        metadata={
            "help": "Initialise the LoRA adapter of `peft_config` with 'rlpo' or 'rlmo' (orthonormal top/bottom-r "
            "right singular vectors, B = 0; https://huggingface.co/papers/2606.31813, paper: r=16, alpha=32, "
            "lr 1e-5), 'pissa' or 'milora' (base rewritten; the reference stays the original model), or a PEFT "
            "init_lora_weights value. Needs a peft_config."
        },
    )
    lora_init_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "Options of `lora_init` as a dict (or JSON string): solver, oversampling, niter, seed, requantize, "
            "show_progress, initial_adapter_dir, save_initial_adapter, export_converted_adapter. solver: 'full' "
            "(default for all four: the authors' float32 thin SVD of each weight), 'randomized' (rlpo/pissa: faster, "
            "but up to 0.36 away from the exact top-16 subspace on SmolLM2-135M's weights, sine of the largest "
            "principal angle) or 'gram' (rlmo/milora: float64 Gram eigenpairs, more accurate at the bottom than a "
            "float32 SVD, so not the authors' factors)."
        },
    )

    def _check_lora_init(self):
        from .integration import check_lora_init_args  # lazy: torch/peft only when the config is built

        if isinstance(self.lora_init_kwargs, str):
            self.lora_init_kwargs = json.loads(self.lora_init_kwargs)
        check_lora_init_args(self.lora_init, self.lora_init_kwargs)
