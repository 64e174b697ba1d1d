"""What the trainers call when ``args.lora_init`` is set: build the initialised PeftModel before TRL sees the model.

Why not let TRL build it from ``peft_config``? TRL then computes reference log-probs with the adapters *disabled*
(DPO always; GRPO when β ≠ 0). After PiSSA/MiLoRA the adapter-off model is the residual W − γ·B₀A₀, not the original
model, so training would silently run against a wrong reference. Handing TRL a ready ``PeftModel`` (and no
``peft_config``) makes it copy the initialised adapter into a frozen "ref" adapter instead, whose output is the
original model's for every init here (B₀ = 0 for RLPO/RLMO; W_res + γ·B₀A₀ = W for PiSSA/MiLoRA). The adapter config
says ``init_lora_weights=True`` by then, so that copy does not re-run an init on the rewritten weights.
"""

import os
from typing import NamedTuple

from peft import LoraConfig, PeftModel
from transformers import set_seed

from .._compat import fsdp_requested
from .api import get_peft_model_with_init
from .options import TRAINER_OPTIONS, check_method, check_options, rewrites_base
from .saving import INITIAL_ADAPTER_DIRNAME, LoraInitCallback, save_initial_adapter


class PreparedModel(NamedTuple):
    model: PeftModel
    peft_config: None  # consumed: TRL must not wrap the model again
    quantization_config: None  # consumed when the model was loaded here
    callbacks: list | None


def check_lora_init_args(lora_init, lora_init_kwargs) -> None:
    """Config-time validation of ``lora_init`` / ``lora_init_kwargs`` (no model needed)."""
    if lora_init is None:
        if lora_init_kwargs:
            raise ValueError("lora_init_kwargs is set but lora_init is not: set lora_init (e.g. 'rlpo') or drop it.")
        return
    if lora_init_kwargs is not None and not isinstance(lora_init_kwargs, dict):
        raise TypeError(f"lora_init_kwargs must be a dict of options, got {type(lora_init_kwargs).__name__}.")
    check_options(check_method(lora_init), lora_init_kwargs, allow_trainer_options=True)


def _load_model(model_id: str, args, quantization_config):
    # Mirrors the model loading at the top of TRL 1.16's GRPOTrainer/DPOTrainer.__init__.
    from trl.trainer.utils import create_model_from_path

    model_init_kwargs = dict(args.model_init_kwargs or {})
    if quantization_config is not None:
        if "quantization_config" in model_init_kwargs:
            raise ValueError(
                "You set `quantization_config` both as a trainer argument and in `args.model_init_kwargs`. Please set "
                "it in only one place, preferably as a trainer argument."
            )
        model_init_kwargs["quantization_config"] = quantization_config
    if args.distributed_state.distributed_type in ["MULTI_GPU", "DEEPSPEED"]:
        model_init_kwargs["device_map"] = None  # distributed training requires device_map=None ("auto" fails)
    model_init_kwargs.setdefault("trust_remote_code", args.trust_remote_code)
    return create_model_from_path(model_id, **model_init_kwargs)


def apply_lora_init_to_trainer_arguments(model, args, trainer_kwargs: dict) -> tuple:
    """What a trainer's ``__init__`` hands to TRL when ``args.lora_init`` is set: the initialised PeftModel, and its
    keyword arguments with ``peft_config`` / ``quantization_config`` consumed and ``callbacks`` completed."""
    prepared = prepare_model_for_trainer(
        model,
        trainer_kwargs.get("peft_config"),
        args,
        trainer_kwargs.get("quantization_config"),
        trainer_kwargs.get("callbacks"),
    )
    return prepared.model, {
        **trainer_kwargs,
        "peft_config": None,
        "quantization_config": None,
        "callbacks": prepared.callbacks,
    }


def prepare_model_for_trainer(model, peft_config, args, quantization_config=None, callbacks=None) -> PreparedModel:
    """Load (if a path), wrap with LoRA and initialise with ``args.lora_init``; returns what to pass to TRL.

    Args:
        model: a model id/path or a ``PreTrainedModel`` (not a ``PeftModel``).
        peft_config: the ``peft.LoraConfig``; required.
        args: the trainer config (``RLVRGRPOConfig`` / ``ISDPOConfig``): reads ``lora_init``, ``lora_init_kwargs``,
            ``seed``, ``output_dir``, ``model_init_kwargs``, ``trust_remote_code`` and the distributed set-up.
        quantization_config: the trainer's ``quantization_config`` argument (used when loading from a path).
        callbacks: the trainer's callbacks; ``LoraInitCallback`` is appended for residual inits.

    Returns:
        ``PreparedModel(model=peft_model, peft_config=None, quantization_config=None, callbacks=...)``. For residual
        inits the adapter at init is saved to ``<output_dir>/lora_init_adapter`` (option ``initial_adapter_dir``;
        ``save_initial_adapter=False`` to skip), which the callback needs to write adapters for the original base
        (``export_converted_adapter=False``: no callback; required under FSDP, refused otherwise).
    """
    method = check_method(args.lora_init)
    options = dict(args.lora_init_kwargs or {})
    check_options(method, options, allow_trainer_options=True)
    if peft_config is None:
        hint = (
            " You passed a PeftModel: initialise it yourself with trl_rlvr_ext.lora_init.init_lora and leave lora_init "
            "unset."
            if isinstance(model, PeftModel)
            else ""
        )
        raise ValueError(
            f"lora_init={args.lora_init!r} initialises a LoRA adapter, but no `peft_config` was given. Pass "
            "peft_config=LoraConfig(r=16, lora_alpha=32, target_modules='all-linear') (scripts: --use_peft), or unset "
            f"lora_init.{hint}"
        )
    if not isinstance(peft_config, LoraConfig):
        raise TypeError(f"lora_init needs a peft.LoraConfig, got peft_config of type {type(peft_config).__name__}.")
    if isinstance(model, PeftModel):
        raise TypeError(
            "lora_init with a PeftModel and a peft_config: pass the base model (the adapter is created from peft_config)."
        )
    trainer_options = {key: options.pop(key) for key in TRAINER_OPTIONS if key in options}
    export = rewrites_base(method) and trainer_options.get("save_initial_adapter", True)
    export = export and trainer_options.get("export_converted_adapter", True)
    if export and fsdp_requested(args):
        # Refused before loading anything: the export would have to load the initial adapter into the FSDP-sharded
        # model, which PEFT's conversion cannot do, so it could only be skipped.
        raise ValueError(
            f"lora_init={args.lora_init!r} rewrites the base weights, and under FSDP the adapter for the original base "
            "model cannot be written next to each checkpoint (the parameters are sharded DTensors; PEFT's conversion "
            "loads the initial adapter into the model). Set lora_init_kwargs={'export_converted_adapter': False}: "
            f"the adapter at init is still saved to <output_dir>/{INITIAL_ADAPTER_DIRNAME}; after training, load the "
            "final adapter onto the residual base in one process and call "
            "trl_rlvr_ext.lora_init.save_converted_adapter. Or use 'rlpo'/'rlmo' (base untouched)."
        )
    if isinstance(model, str):
        model = _load_model(model, args, quantization_config)
        quantization_config = None
    is_quantized = getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False)
    zero3 = args.deepspeed_plugin is not None and args.deepspeed_plugin.zero_stage == 3
    if method in ("rlpo", "rlmo", "pissa", "milora"):
        options.setdefault("seed", args.seed)
    # TRL seeds before creating the adapter (PEFT draws A at random); do the same so PEFT's own inits match stock.
    set_seed(args.seed)
    peft_model = get_peft_model_with_init(
        model, peft_config, method, autocast_adapter_dtype=not (zero3 and not is_quantized), **options
    )
    if rewrites_base(method) and trainer_options.get("save_initial_adapter", True):
        directory = trainer_options.get("initial_adapter_dir") or os.path.join(
            args.output_dir, INITIAL_ADAPTER_DIRNAME
        )
        save_initial_adapter(peft_model, directory, is_main_process=args.should_save)
        if export:
            callbacks = [*(callbacks or []), LoraInitCallback()]
    return PreparedModel(peft_model, None, None, callbacks)
