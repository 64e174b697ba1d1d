"""Configuration for `RLVRGRPOTrainer`: TRL's `GRPOConfig` plus the fields of this package's methods.

Each method holds its own fields, as a dataclass mixin, in its own module (`trl_rlvr_ext/grpo/methods/`); this class
inherits them all, so the fields stay flat (the same names in Python, on the command line and in YAML recipes). Every
field defaults to stock TRL behaviour. `__post_init__` runs each method's `check`, then the composition check, which
reads the one table of refused pairs (`trl_rlvr_ext.grpo.composition`).
"""

import dataclasses
import json
import sys
from dataclasses import dataclass, field

from trl import GRPOConfig

from .._compat import check_training_values
from ..lora_init.config import LoraInitArguments
from .composition import check_composition
from .method import GRPOMethod, methods_for, registered_methods
from .methods.clip_objective import (  # noqa: F401  (their public home was this module)
    ADAPTIVE_CLIP_MODES,
    ADAPTIVE_CLIP_REFUSED_LOSS_TYPES,
    ADAPTIVE_CLIP_SCOPES,
    CLIP_RECOVERY_MODES,
    CLIPPED_LOSS_TYPES,
    ClipObjectiveArguments,
    off_policy_diagnostics_apply,
)
from .methods.curation import (  # noqa: F401
    CURATION_MODES,
    SELF_SEQUENCE_AVERAGED_LOSS_TYPES,
    SELF_TOKEN_NORMALISED_LOSS_TYPES,
    CurationArguments,
)
from .methods.delta import TOKEN_CREDIT_MODES, TOKEN_CREDIT_REFUSED_LOSS_TYPES, DeltaArguments  # noqa: F401
from .methods.dynamic_sampling import DynamicSamplingArguments
from .methods.poise import VALUE_BASELINES, PoiseArguments  # noqa: F401
from .methods.popo import OBJECTIVES, PopoArguments  # noqa: F401
from .methods.relex import RelexArguments
from .methods.reward_guard import RewardGuardArguments
from .methods.rsi import RSI_SELECTION_MODES, RSIArguments  # noqa: F401
from .methods.signal_check import SignalCheckArguments
from .vllm_lora import VLLM_SYNC_MODES


# The built-in methods' field mixins, listed last-first so that `dataclasses.fields` lists them in the registry's order
# after TRL's and the LoRA initialiser's fields (a dataclass collects its bases' fields from the last base up).
_METHOD_ARGS = (
    PoiseArguments,
    PopoArguments,
    RelexArguments,
    SignalCheckArguments,
    DynamicSamplingArguments,
    RewardGuardArguments,
    CurationArguments,
    RSIArguments,
    DeltaArguments,
    ClipObjectiveArguments,
)


@dataclass
class RLVRGRPOConfig(*_METHOD_ARGS, LoraInitArguments, GRPOConfig):
    r"""
    Configuration class for [`RLVRGRPOTrainer`]: every field of TRL's `GRPOConfig`, plus the fields of this package's
    methods (each documented below, from its method's module). With the new fields at their defaults the trainer is
    stock TRL `GRPOTrainer`, to the bit. A method of your own adds its fields with `RLVRGRPOConfig.with_methods`.

    Parameters:
        lora_init (`str`, *optional*):
            Initialise the LoRA adapter of `peft_config` (required) with `"rlpo"` (A₀ = top-r right singular vectors
            of W, B₀ = 0), `"rlmo"` (bottom-r), `"pissa"` or `"milora"` (√σ-scaled top/bottom triplets, base
            rewritten to W − γ·B₀A₀), or a PEFT `init_lora_weights` value (`"olora"`, `"gaussian"`, ...). The
            trainer builds the PeftModel itself so that the reference is the original model for every init. Paper
            setting: `"rlpo"` with r = 16, α = 32, learning rate 1e-5.
        lora_init_kwargs (`dict`, *optional*):
            Options of the init: `solver`, `oversampling`, `niter`, `seed` (defaults to `seed`), `requantize`,
            `show_progress`, `initial_adapter_dir`, `save_initial_adapter`, `export_converted_adapter`. See `trl_rlvr_ext.lora_init`.
        vllm_engine_kwargs (`dict`, *optional*):
            Extra keyword arguments for the `vllm.LLM` engine TRL builds in `vllm_mode="colocate"` (TRL exposes no
            `dtype` or `enforce_eager` there), e.g. `{"enforce_eager": True, "dtype": "float32"}`: on a CPU machine
            `enforce_eager` cuts the engine build from ~30 s to ~3 s, and `dtype="float32"` keeps a float32 model in
            float32 (vLLM picks bfloat16 otherwise). See docs/vllm_cpu.md. A server takes its own on its command line.
        vllm_sync (`str`, *optional*, defaults to `"merged"`):
            How the weights reach vLLM at each sync on vLLM's CPU platform. `"merged"` (TRL's way): a PEFT adapter is
            merged and every weight crosses. `"adapter"`: with a LoRA model, vLLM serves the adapter itself (its LoRA
            support) and only the adapter's tensors cross, plus the base once where it differs from the checkpoint
            vLLM loaded (PiSSA/MiLoRA's residual base). Where vLLM's LoRA does not cover the adapter (DoRA, LoRA on
            the embeddings or LM head, `modules_to_save`, ...) the merged sync runs and one log line says why. A
            server must be started with `trl-rlvr-ext vllm-serve --lora_rank R`. See docs/vllm_cpu.md.
    """

    vllm_engine_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "Extra keyword arguments for the colocated vllm.LLM engine, as a dict (or JSON string), e.g. "
            '{"enforce_eager": true, "dtype": "float32"} (CPU: ~3 s engine build instead of ~30 s). Colocate only.'
        },
    )

    vllm_sync: str = field(
        default="merged",
        metadata={
            "help": "How weights reach vLLM (CPU platform): 'merged' (TRL's way: the adapter merged, every weight "
            "crosses) or 'adapter' (a LoRA model: vLLM serves the adapter, only its tensors cross; the base once "
            "where it differs, e.g. PiSSA). A server needs `trl-rlvr-ext vllm-serve --lora_rank R`.",
            "choices": list(VLLM_SYNC_MODES),
        },
    )

    def __post_init__(self):
        check_training_values(self)  # before TRL's own checks, which would fail on them less clearly
        super().__post_init__()
        self._check_package_options()

    def _check_package_options(self):
        # This package's checks alone (also run on a plain GRPOConfig converted by the trainer, whose TRL fields
        # GRPOConfig.__post_init__ has already resolved): each method's own, then the table of refused pairs
        self._check_lora_init()
        for method in methods_for(self):
            method.check(self)
        check_composition(self)
        self._check_vllm_sync()
        if isinstance(self.vllm_engine_kwargs, str):  # from a command line
            self.vllm_engine_kwargs = json.loads(self.vllm_engine_kwargs)

    def _check_vllm_sync(self):
        sync = getattr(self, "vllm_sync", "merged")
        if sync not in VLLM_SYNC_MODES:
            raise ValueError(f"vllm_sync must be 'merged' or 'adapter', got {sync!r}.")
        # With use_vllm=False nothing syncs and the field is inert (a vLLM recipe run with `--use_vllm false`)
        if sync == "adapter" and getattr(self, "vllm_enable_sleep_mode", False):
            raise ValueError(
                "vllm_sync='adapter' keeps the base weights in vLLM, but vllm_enable_sleep_mode=True discards them at "
                "each sleep: set vllm_enable_sleep_mode=False, or vllm_sync='merged'."
            )

    @classmethod
    def with_methods(cls, *methods: type[GRPOMethod]) -> type["RLVRGRPOConfig"]:
        """A subclass of this config that also holds the fields of ``methods`` (their ``Args`` mixins), flat like the
        built-in ones: ``MyConfig = RLVRGRPOConfig.with_methods(MyMethod)``, then ``MyConfig(my_field=...)``, or
        ``TrlParser((MyConfig,))`` for the command line and YAML. The methods must be registered (`register_method`)
        for the trainer to run them."""
        mixins = [m.Args for m in methods if m.Args is not None and not issubclass(cls, m.Args)]
        if not mixins:
            return cls
        taken = {f.name for f in dataclasses.fields(cls)}
        for mixin in mixins:
            clash = taken & {f.name for f in dataclasses.fields(mixin)}
            if clash:
                raise ValueError(f"{mixin.__name__} redefines the config fields {sorted(clash)}: rename them.")
            taken |= {f.name for f in dataclasses.fields(mixin)}
        name = cls.__name__ + "".join(m.__name__ for m in methods if m.Args in mixins)
        # Defined in the (first) method's module, under that name, so that pickling the config (transformers saves
        # it as training_args.bin in every checkpoint) finds it again; built once per module.
        module = sys.modules[methods[0].__module__]
        existing = getattr(module, name, None)
        if isinstance(existing, type) and existing.__bases__ == (*reversed(mixins), cls):
            return existing
        config = dataclass(type(name, (*reversed(mixins), cls), {"__module__": module.__name__, "__qualname__": name}))
        setattr(module, name, config)
        return config


def _method_parameters() -> str:
    """The "Parameters" entries of the built-in methods' mixins, appended to the class docstring (one place each)."""
    import inspect

    sections = []
    for method in registered_methods():
        doc = inspect.getdoc(method.Args) if method.Args is not None else ""
        if "Parameters:" in doc:
            entries = doc.split("Parameters:", 1)[1].strip("\n")
            sections.append("\n".join("    " + line if line else "" for line in entries.splitlines()))
    return "\n".join(sections)


RLVRGRPOConfig.__doc__ = RLVRGRPOConfig.__doc__.rstrip() + "\n" + _method_parameters() + "\n"
