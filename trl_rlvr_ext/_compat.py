"""Small adapters to the installed versions of our dependencies. Imports nothing heavy at module level."""

import dataclasses
import functools
import logging
import os


# ---------------------------------------------------------------- activation checkpointing
@functools.cache
def activation_checkpointing_name() -> str:
    """The `TrainingArguments` field that switches activation (gradient) checkpointing on this transformers.

    Newer transformers renamed ``gradient_checkpointing`` to ``activation_checkpointing`` and warn (FutureWarning) on the
    old name; older ones (e.g. 5.18) only know ``gradient_checkpointing``.
    """
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def activation_checkpointing_kwargs(enabled: bool) -> dict:
    """``{"activation_checkpointing": enabled}``, or ``{"gradient_checkpointing": enabled}`` where that is the only
    name: pass it to a config (``RLVRGRPOConfig(..., **activation_checkpointing_kwargs(False))``)."""
    return {activation_checkpointing_name(): enabled}


# ---------------------------------------------------------------- bitsandbytes' CPU kernel notice
# peft imports bitsandbytes eagerly whenever it is installed, and on a CPU with AVX512-BF16 bitsandbytes then tries to
# load its optional 4-bit CPU kernel from the hub through the `kernels` package (which transformers >= 5.25 installs).
# Offline, `kernels` logs that it skips the publisher check for that kernel's repository, and bitsandbytes that the
# kernel could not be loaded. Both concern 4-bit models only, so they are held back and shown again
# (`replay_bitsandbytes_kernel_notice`) when a 4-bit model is asked for. Only these two messages are held: any other
# record of either logger passes.
_BNB_KERNEL_REPO = "kernels-community/quantization-bitsandbytes"
_HELD_NOTICES = {
    "bitsandbytes.backends.cpu.ops": "Failed to load CPU gemm_4bit_forward",
    "kernels._internals.hf_hub": f"Skipping publisher trust check for '{_BNB_KERNEL_REPO}'",
}


class _HoldBitsandbytesKernelNotice(logging.Filter):
    def __init__(self):
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        prefix = _HELD_NOTICES.get(record.name)
        if prefix is not None and str(record.getMessage()).startswith(prefix):
            self.held.append(record)
            return False
        return True


_notice_filter = _HoldBitsandbytesKernelNotice()


def hold_bitsandbytes_kernel_notice() -> None:
    """Hold back the notices of bitsandbytes' optional 4-bit CPU kernel (idempotent)."""
    for name in _HELD_NOTICES:
        logger = logging.getLogger(name)
        if _notice_filter not in logger.filters:
            logger.addFilter(_notice_filter)


def replay_bitsandbytes_kernel_notice() -> None:
    """Show the held notices, in the order they came (call this when a 4-bit model is requested: then they matter)."""
    for name in _HELD_NOTICES:
        logging.getLogger(name).removeFilter(_notice_filter)
    for record in _notice_filter.held:
        logging.getLogger(record.name).handle(record)
    _notice_filter.held.clear()


# ---------------------------------------------------------------- a plain TRL config handed to our trainer
_config_logger = logging.getLogger("trl_rlvr_ext.config")


def resolve_trainer_config(args, config_cls, base_cls, trainer_name: str, model, suffix: str, defaults_note: str):
    """The config a trainer of this package runs with, given what the user passed as ``args``.

    - ``None``: ``config_cls("<model name>-<suffix>")``, the output folder TRL's trainer would pick (``-GRPO``,
      ``-DPO``): a user who only changes the import finds the run where stock TRL puts it.
    - an instance of ``config_cls``: itself.
    - an instance of exactly ``base_cls``, the TRL class ``config_cls`` extends (``trl.GRPOConfig`` for `RLVRGRPOConfig`): the same
      config as a ``config_cls``, every field kept with the value TRL's ``__post_init__`` resolved, and this package's
      options at their defaults (``defaults_note`` says what that means for this trainer); said once in the log. The
      TRL fields are copied rather than re-initialised, because TRL's ``__post_init__`` is not
      idempotent (it fills ``steps_per_generation`` and ``generation_batch_size``, which it then refuses together).
      Unless the run was launched with this package's options in its config file or command line (TRL's own
      scripts parse a ``trl.GRPOConfig``, whose parser drops keys it does not know): then a ``ValueError`` says which
      options were lost and how to keep them, rather than training stock TRL.
    - anything else (a user's subclass of ``base_cls`` included): a ``TypeError`` naming both classes by module and
      what to derive from.
    """
    if args is None:
        from trl.trainer.utils import get_config_model_id

        model_name = model if isinstance(model, str) else get_config_model_id(model.config)
        return config_cls(f"{model_name.split('/')[-1]}-{suffix}")
    if isinstance(args, config_cls):
        return args
    base = base_cls
    if type(args) is not base:
        raise TypeError(_wrong_config_message(args, config_cls, base, trainer_name))
    lost = package_options_in_launch(config_cls, base)
    if lost:
        raise ValueError(_lost_options_message(lost, config_cls, base, trainer_name))
    converted = object.__new__(config_cls)
    converted.__dict__.update(args.__dict__)
    base_fields = {f.name for f in dataclasses.fields(base)}
    for f in dataclasses.fields(config_cls):
        if f.name in base_fields or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            setattr(converted, f.name, f.default)
        else:
            setattr(converted, f.name, f.default_factory())
    check_training_values(converted)
    converted._check_package_options()
    _config_logger.warning(
        "%s was given a plain trl.%s: it runs with it as a %s, every field kept and this package's options at their "
        "defaults (%s).",
        trainer_name,
        base.__name__,
        config_cls.__name__,
        defaults_note,
    )
    return converted


def _qualified(cls) -> str:
    """``module.Class``, with the public module for this package's and TRL's classes (``trl.GRPOConfig``)."""
    module = cls.__module__
    for package in ("trl_rlvr_ext", "trl"):
        if module == package or module.startswith(package + "."):
            import importlib

            if getattr(importlib.import_module(package), cls.__name__, None) is cls:
                module = package
    return f"{module}.{cls.__qualname__}"


def _wrong_config_message(args, config_cls, base, trainer_name: str) -> str:
    ours, theirs, given = _qualified(config_cls), _qualified(base), _qualified(type(args))
    if isinstance(args, base):
        return (
            f"{trainer_name} needs `args` to be a {ours} (or a plain {theirs}), got {given}, a subclass of {theirs}. "
            f"Make {given} derive from {ours} instead of {theirs}: it takes every {base.__name__} field plus this "
            f"package's options, so a project whose config subclasses {theirs} changes two names, the trainer and its "
            "config's base class (docs/use_in_your_project.md)."
        )
    return (
        f"{trainer_name} needs `args` to be a {ours} (or a plain {theirs}), got {given}. Build it with "
        f"`{ours}(...)`: it takes every {base.__name__} field plus this package's options."
    )


def package_options_in_launch(config_cls, base, argv=None) -> dict[str, str]:
    """This package's options (fields of ``config_cls`` that ``base`` lacks) set where the run was launched, which a
    parser of ``base`` drops: ``{option: where}``, from the YAML file after ``--config`` (TRL's `TrlParser` reads it
    and, in TRL's scripts, drops unknown keys) and from ``--option`` flags on the command line."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    ours = {f.name for f in dataclasses.fields(config_cls)} - {f.name for f in dataclasses.fields(base)}
    found = {}
    for i, token in enumerate(argv):
        name = token[2:].split("=", 1)[0] if token.startswith("--") else None
        if name in ours:
            found[name] = "the command line"
        if token == "--config" and i + 1 < len(argv) and os.path.isfile(argv[i + 1]):
            import yaml

            try:
                with open(argv[i + 1]) as file:
                    config = yaml.safe_load(file)
            except (OSError, yaml.YAMLError):
                continue  # not a config this check can read; TRL's parser reports it
            if isinstance(config, dict):
                found.update({key: argv[i + 1] for key in config if key in ours})
    return found


def _lost_options_message(lost: dict[str, str], config_cls, base, trainer_name: str) -> str:
    ours, theirs = _qualified(config_cls), _qualified(base)
    where = "; ".join(f"{name} (in {place})" for name, place in sorted(lost.items()))
    return (
        f"{trainer_name} was given a plain {theirs}, but the run was launched with this package's options: {where}. "
        f"A {theirs} cannot hold them (TRL's parser drops keys its config does not know), so the run would train stock "
        f"TRL. Parse the config as a {ours}: in your script, put {ours} where {theirs} is in the TrlParser's dataclass "
        f"types; or run this package's script with the same YAML (`trl-rlvr-ext {base.__name__[:-6].lower()} --config "
        "<file>`, or `accelerate launch -m trl_rlvr_ext.scripts."
        f"{base.__name__[:-6].lower()} --config <file>`)."
    )


def check_training_values(args) -> None:
    """Refuse `TrainingArguments` values that cannot be right, which transformers and TRL accept and then train with
    (a negative learning rate ascends the loss) or fail on much later (a zero batch size)."""
    if not args.learning_rate >= 0:
        raise ValueError(
            f"learning_rate must be >= 0, got {args.learning_rate}: a negative rate would climb the loss instead of "
            "descending it. Use a positive value (TRL's GRPO and DPO default is 1e-6)."
        )
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        value = getattr(args, name)
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}.")


# ---------------------------------------------------------------- FSDP asked for, DDP run (accelerate)
# accelerate turns its FSDP plugin on only for these distributed types (accelerate 1.15 `AcceleratorState`); for any
# other multi-process type, e.g. MULTI_CPU (`use_cpu=True`), it silently runs plain DDP instead.
_FSDP_CAPABLE_TYPES = (
    "FSDP",
    "MULTI_GPU",
    "MULTI_MLU",
    "MULTI_SDAA",
    "MULTI_MUSA",
    "MULTI_NPU",
    "MULTI_XPU",
    "MULTI_HPU",
    "MULTI_NEURON",
)


def fsdp_requested(args) -> bool:
    """Whether FSDP is asked for: by an accelerate launch with an FSDP config (``ACCELERATE_USE_FSDP``) or by the
    trainer config's ``fsdp`` field."""
    import os

    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" or bool(getattr(args, "fsdp", None))


def check_fsdp_really_runs(args, trainer_name: str) -> None:
    """Refuse a run where FSDP is asked for but accelerate would silently run DDP (called before any model is built).

    With several processes whose distributed type accelerate does not shard (MULTI_CPU: ``use_cpu=True``), accelerate
    drops the FSDP plugin without a word and every rank trains a full replica: memory, speed and the saved checkpoint
    format are then not what the config says.
    """
    if not fsdp_requested(args):
        return
    state = args.distributed_state
    kind = getattr(state.distributed_type, "value", str(state.distributed_type))
    if state.num_processes > 1 and kind not in _FSDP_CAPABLE_TYPES:
        raise ValueError(
            f"{trainer_name}: FSDP is requested (accelerate FSDP config / ACCELERATE_USE_FSDP=true, or `fsdp` in the "
            f"config) but this {state.num_processes}-process run is {kind}, for which accelerate silently drops the FSDP "
            "plugin and runs plain DDP (every rank a full replica). This happens with use_cpu=True: accelerate shards "
            "only on accelerators (GPU, XPU, NPU, HPU, ...). Run on accelerators, or launch with a DDP config "
            "(multi_gpu.yaml) if replicas are what you want."
        )
