"""The ``trl-rlvr-ext`` command line: one subcommand per job, each implemented by a module's ``cli_main(argv)``.

    trl-rlvr-ext demo                                  # the main job on the embedded default (offline)
    trl-rlvr-ext grpo --config recipe.yaml [--accelerate_config zero3 --num_processes 8]
    trl-rlvr-ext dpo  --config recipe.yaml

Training subcommands run in this process; with ``--accelerate_config`` (a file, or one of TRL's packaged names:
single_gpu, multi_gpu, zero1, zero2, zero3, fsdp1, fsdp2) or ``--num_processes`` they are handed to
``accelerate launch`` instead, exactly as ``accelerate launch -m trl_rlvr_ext.scripts.<job>`` would run them.
"""

import importlib
import importlib.resources
import os
import subprocess
import sys


# subcommand -> (module with cli_main, one-line help, launchable through accelerate)
COMMANDS = {
    "demo": ("trl_rlvr_ext.toy.demo", "GRPO with NSR on the offline toy task: the embedded default", False),
    "grpo": ("trl_rlvr_ext.scripts.grpo", "train with RLVRGRPOTrainer from a YAML recipe", True),
    "dpo": ("trl_rlvr_ext.scripts.dpo", "train with ISDPOTrainer (IS-DAA) from a YAML recipe", True),
    "eval": ("trl_rlvr_ext.evaluation.cli", "Pass@k evaluation of one or more models: JSON + PNG curve", False),
    "study": ("trl_rlvr_ext.scripts.study", "run a study (arms x seeds, Pass@k table and plots), e.g. self", False),
    "curate": ("trl_rlvr_ext.curation.offline", "score a dataset's prompts (pass rate, greedy) and filter", False),
    "score-behavior": (
        "trl_rlvr_ext.dpo.behavior",
        "add behavior_*_logps columns to a preference dataset for IS-DPO",
        False,
    ),
}


def _usage() -> str:
    lines = ["usage: trl-rlvr-ext <command> [options]", "", "commands:"]
    lines += [f"  {name:<16}{help_text}" for name, (_, help_text, _) in COMMANDS.items()]
    lines += ["", "Run `trl-rlvr-ext <command> --help` for the options of a command."]
    return "\n".join(lines)


def _pop_option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name:
            if i + 1 >= len(argv):
                raise SystemExit(f"trl-rlvr-ext: {name} needs a value.")
            value = argv[i + 1]
            del argv[i : i + 2]
            return value
        if arg.startswith(name + "="):
            del argv[i]
            return arg.split("=", 1)[1]
    return None


def resolve_accelerate_config(name_or_path: str) -> str:
    """A path to an accelerate config file: the path itself, or the TRL-packaged config of that name."""
    if os.path.isfile(name_or_path):
        return name_or_path
    packaged = importlib.resources.files("trl").joinpath("accelerate_configs", f"{name_or_path}.yaml")
    if packaged.is_file():
        return str(packaged)
    available = sorted(
        p.name[: -len(".yaml")]
        for p in importlib.resources.files("trl").joinpath("accelerate_configs").iterdir()
        if p.name.endswith(".yaml")
    )
    raise SystemExit(
        f"trl-rlvr-ext: accelerate config {name_or_path!r} is neither a file nor one of TRL's packaged configs "
        f"{available}. Pass a path such as recipes/accelerate_configs/deepspeed_zero3.yaml."
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from . import __version__

        print(__version__)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"trl-rlvr-ext: unknown command {command!r}.\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, _, launchable = COMMANDS[command]
    if launchable:
        accelerate_config = _pop_option(rest, "--accelerate_config")
        num_processes = _pop_option(rest, "--num_processes")
        if accelerate_config is not None or num_processes is not None:
            launch = [sys.executable, "-m", "accelerate.commands.launch"]
            if accelerate_config is not None:
                launch += ["--config_file", resolve_accelerate_config(accelerate_config)]
            if num_processes is not None:
                launch += ["--num_processes", num_processes]
            return subprocess.call([*launch, "-m", module_name, *rest])
    return int(importlib.import_module(module_name).cli_main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
