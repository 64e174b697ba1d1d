"""The command line of the training scripts (``trl-rlvr-ext grpo`` / ``dpo``): launcher options, packaged recipe names,
a short ``--help`` that imports nothing heavy, CPU defaults and clear errors for the usual traps.

    trl-rlvr-ext grpo --config toy_nsr                              # a packaged recipe, in this process
    trl-rlvr-ext grpo --config my.yaml --accelerate_config zero3 --num_processes 8     # under `accelerate launch`
    trl-rlvr-ext grpo --help        # launcher options and the most used options, with defaults
    trl-rlvr-ext grpo --help-all    # every option (TRL's full parser; imports TRL)

This module imports only the standard library at module level: ``--help`` must answer at once.
"""

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .errors import concise_parser_errors
from .recipes import resolve_accelerate_config, resolve_recipe


@dataclass(frozen=True)
class SummaryOption:
    """One line of the short ``--help``: a field of the script's dataclasses, its default and what it does.

    ``default`` is the dataclass default (a test checks it against the real field); ``note`` says what an unset
    default resolves to, where that matters."""

    name: str
    default: object
    help: str
    note: str = ""


# Summary lines that read the same for every training script (each script's SUMMARY places them among its own)
OUTPUT_AND_LENGTH_SUMMARY = (
    SummaryOption("output_dir", None, "Where the model and checkpoints go.", "TRL's 'trainer_output' if unset"),
    SummaryOption("max_steps", -1, "Optimiser steps; -1: train num_train_epochs epochs."),
    SummaryOption("num_train_epochs", 3.0, "Epochs over the training set (when max_steps is -1)."),
    SummaryOption("learning_rate", 1e-06, "Peak learning rate of AdamW."),
)
LORA_SUMMARY = (
    SummaryOption("use_peft", False, "Train a LoRA adapter (lora_r, lora_alpha, lora_target_modules ...)."),
    SummaryOption("lora_init", None, "Initialise the LoRA adapter: rlpo, rlmo, pissa, milora."),
)
DEVICE_SUMMARY = (
    SummaryOption("use_cpu", False, "Train on CPU (needed on a machine without a GPU)."),
    SummaryOption(
        "bf16", None, "bf16 mixed precision.", "on unless fp16 is set: on a CPU add --use_cpu true, or --bf16 false"
    ),
    SummaryOption(
        "activation_checkpointing",
        None,
        "Recompute activations in the backward pass (less memory, slower).",
        "TRL turns it on if unset",
    ),
)


@dataclass(frozen=True)
class TrainingCommand:
    name: str  # the subcommand: "grpo" or "dpo"
    module: str  # run under `accelerate launch -m <module>`
    description: str
    example_recipe: str
    summary: Sequence[SummaryOption]
    make_parser: Callable  # (prog) -> TrlParser; imports TRL
    main: Callable  # (script_args, training_args, model_args, dataset_args) -> trainer
    # (parsed, explicit) -> None: the command's own defaults that depend on other options, applied after parsing;
    # `explicit` holds the keys the recipe or the command line set (those are never changed)
    adjust: Callable | None = None

    @property
    def prog(self) -> str:
        return f"trl-rlvr-ext {self.name}"


LAUNCHER_OPTIONS = (
    (
        "--config RECIPE",
        (
            "A packaged recipe by name (see `trl-rlvr-ext recipes`; e.g. {example}) or a path to a YAML file whose "
            "keys are the options below. Default: none (options from the command line only)."
        ),
    ),
    (
        "--accelerate_config CONFIG",
        (
            "Run under `accelerate launch` with this config: one of ours by name (cpu, single_gpu, multi_gpu, "
            "deepspeed_zero2, deepspeed_zero3, fsdp2), then TRL's (zero1, zero2, zero3, fsdp1, fsdp2, ...), or a "
            "file. Default: none (run in this process)."
        ),
    ),
    (
        "--num_processes N",
        "Processes for `accelerate launch` (implies it). Default: the accelerate config's value (1 without one).",
    ),
)


def _wrap(text: str, indent: int, width: int = 119) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=" " * indent, subsequent_indent=" " * indent)


def format_summary_help(command: TrainingCommand) -> str:
    """The short ``--help``: usage, launcher options, the most used options with their defaults, the way to all."""
    lines = [
        f"usage: {command.prog} [--config RECIPE] [--accelerate_config CONFIG] [--num_processes N] [--KEY VALUE ...]",
        "",
        command.description,
        "",
        "launcher options:",
    ]
    for flag, text in LAUNCHER_OPTIONS:
        lines.append(f"  {flag}")
        lines += _wrap(text.format(example=command.example_recipe), 6)
    lines += [
        "",
        "most used options (a recipe's values replace the defaults; flags on the command line replace the recipe's):",
    ]
    for option in command.summary:
        default = "none" if option.default is None else repr(option.default)
        lines.append(f"  --{option.name}  (default: {default}{f'; {option.note}' if option.note else ''})")
        lines += _wrap(option.help, 6)
    lines += [
        "",
        f"Every option, with its default: {command.prog} --help-all",
        "Packaged recipes and accelerate configs: trl-rlvr-ext recipes",
    ]
    return "\n".join(lines)


def _pop_option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                raise SystemExit(f"trl-rlvr-ext: {name} needs a value.")
            value = argv[i + 1]
            del argv[i : i + 2]
            return value
        if arg.startswith(name + "="):
            del argv[i]
            return arg.split("=", 1)[1]
    return None


def _has_option(argv: Sequence[str], name: str) -> bool:
    return any(arg == name or arg.startswith(name + "=") for arg in argv)


def resolve_config_argument(argv: Sequence[str], command: str | None = None) -> list[str]:
    """``argv`` with ``--config NAME`` (or ``--config=NAME``) replaced by ``--config <path of the YAML>``."""
    argv = list(argv)
    value = _pop_option(argv, "--config")
    if value is None:
        return argv
    return ["--config", resolve_recipe(value, command), *argv]


def _config_path(argv: Sequence[str]) -> str | None:
    return argv[argv.index("--config") + 1] if "--config" in argv else None


def _accelerate_says_cpu() -> bool:
    return os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")


def _recipe_keys(argv: Sequence[str]) -> set:
    config_path = _config_path(argv)
    if config_path is None:
        return set()
    import yaml

    with open(config_path) as f:
        config = yaml.safe_load(f)
    return set(config) if isinstance(config, dict) else set()


def explicit_keys(argv: Sequence[str]) -> set:
    """The option names the recipe (``--config``) or the command line of ``argv`` set."""
    flags = {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--") and arg != "--config"}
    return _recipe_keys(argv) | flags


def cpu_defaults(argv: Sequence[str]) -> list[str]:
    """Under ``accelerate launch`` with a CPU config (``ACCELERATE_USE_CPU``), train on CPU in fp32: add
    ``--use_cpu true`` and ``--bf16 false`` unless the recipe or the command line sets them. Without them TRL's default
    bf16=True fails on a machine without a bf16 GPU, and the accelerate config's mixed_precision "no" is contradicted."""
    argv = list(argv)
    if not _accelerate_says_cpu():
        return argv
    recipe_keys = _recipe_keys(argv)
    for key, value in (("use_cpu", "true"), ("bf16", "false")):
        if key not in recipe_keys and not _has_option(argv, f"--{key}"):
            argv += [f"--{key}", value]
    return argv


_CHECKPOINTING_RENAMES = {
    "activation_checkpointing": "gradient_checkpointing",
    "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs",
}


def adapt_checkpointing_names(argv: Sequence[str], workdir: str) -> list[str]:
    """On a transformers without ``activation_checkpointing`` (it only knows ``gradient_checkpointing``), rename the
    new keys, in the recipe (a rewritten copy in ``workdir``) and on the command line, to the old ones."""
    from .._compat import activation_checkpointing_name

    argv = list(argv)
    if activation_checkpointing_name() == "activation_checkpointing":
        return argv
    for i, arg in enumerate(argv):
        for new, old in _CHECKPOINTING_RENAMES.items():
            if arg == f"--{new}" or arg.startswith(f"--{new}="):
                argv[i] = arg.replace(f"--{new}", f"--{old}", 1)
    config_path = _config_path(argv)
    if config_path is not None:
        import yaml

        with open(config_path) as f:
            config = yaml.safe_load(f)
        if isinstance(config, dict) and any(new in config for new in _CHECKPOINTING_RENAMES):
            config = {_CHECKPOINTING_RENAMES.get(key, key): value for key, value in config.items()}
            adapted = os.path.join(workdir, os.path.basename(config_path))
            with open(adapted, "w") as f:
                yaml.safe_dump(config, f, sort_keys=False)
            argv[argv.index("--config") + 1] = adapted
    return argv


_BF16_ERROR = "doesn't support bf16"


def bf16_hint(prog: str) -> str:
    return (
        f"{prog}: bf16 is on (TRL turns it on by default unless fp16 is set), but this machine has no GPU with bf16. "
        "On a CPU, add `--use_cpu true` (or `use_cpu: true` in the recipe); on a GPU without bf16, add `--bf16 false`."
    )


def parse(command: TrainingCommand, argv: Sequence[str]):
    """The four parsed dataclasses of a training command line (recipe names resolved, CPU defaults applied).

    A misspelt option is an error, not silently ignored (``fail_with_unknown_args``)."""
    argv = cpu_defaults(resolve_config_argument(argv, command.name))
    with tempfile.TemporaryDirectory(prefix="trl_rlvr_ext_recipe_") as workdir:
        argv = adapt_checkpointing_names(argv, workdir)
        parser = command.make_parser(prog=command.prog)
        concise_parser_errors(parser, command.prog)
        try:
            parsed = parser.parse_args_and_config(args=argv, fail_with_unknown_args=True)
        except ValueError as error:
            if _BF16_ERROR in str(error):
                raise SystemExit(bf16_hint(command.prog)) from None
            raise
        explicit = explicit_keys(argv)
    if command.adjust is not None:
        command.adjust(parsed, explicit)
    model_args = parsed[2]
    if getattr(model_args, "load_in_4bit", False):
        from .._compat import replay_bitsandbytes_kernel_notice

        replay_bitsandbytes_kernel_notice()
    return parsed


def run_training_cli(command: TrainingCommand, argv: Sequence[str] | None = None) -> int:
    """``trl-rlvr-ext <grpo|dpo> [launcher options] [--config RECIPE] [--key value ...]``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(format_summary_help(command))
        return 0
    if "--help-all" in argv:
        print(format_summary_help(command).split("\nmost used options")[0])
        print("\nall options (keys of the recipe YAML, or --key value):\n")
        print(command.make_parser(prog=command.prog).format_help())
        return 0
    accelerate_config = _pop_option(argv, "--accelerate_config")
    num_processes = _pop_option(argv, "--num_processes")
    argv = resolve_config_argument(argv, command.name)
    if accelerate_config is not None or num_processes is not None:
        launch = [sys.executable, "-m", "accelerate.commands.launch"]
        if accelerate_config is not None:
            launch += ["--config_file", resolve_accelerate_config(accelerate_config)]
        if num_processes is not None:
            launch += ["--num_processes", num_processes]
        return subprocess.call([*launch, "-m", command.module, *argv])
    command.main(*parse(command, argv))
    return 0
