"""Train with `RLVRGRPOTrainer` from a flat YAML recipe.

    trl-rlvr-ext grpo --config toy_nsr [--key value ...]                # a packaged recipe (`trl-rlvr-ext recipes`)
    trl-rlvr-ext grpo --config my_recipe.yaml --accelerate_config multi_gpu --num_processes 8
    python -m trl_rlvr_ext.scripts.grpo --config toy_nsr
    accelerate launch --config_file my_accelerate.yaml -m trl_rlvr_ext.scripts.grpo --config toy_nsr

Every key of the YAML is a field of `RLVRGRPOScriptArguments`, `RLVRGRPOConfig`, TRL's `ModelConfig` or
`DatasetMixtureConfig`; command-line flags override the YAML (TRL's `TrlParser`). Nothing heavy is imported at module
level, so that ``--help`` answers at once.
"""

import sys

from .launch import (
    DEVICE_SUMMARY,
    LORA_SUMMARY,
    OUTPUT_AND_LENGTH_SUMMARY,
    SummaryOption,
    TrainingCommand,
    run_training_cli,
)


def __getattr__(name):
    if name == "RLVRGRPOScriptArguments":  # imports TRL: loaded on first use
        from .grpo_arguments import RLVRGRPOScriptArguments

        return RLVRGRPOScriptArguments
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_parser(prog: str | None = None):
    from trl import DatasetMixtureConfig, ModelConfig, TrlParser

    from ..grpo.grpo_config import RLVRGRPOConfig
    from .grpo_arguments import RLVRGRPOScriptArguments

    return TrlParser((RLVRGRPOScriptArguments, RLVRGRPOConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def build_trainer(script_args, training_args, model_args, dataset_args):
    """The `RLVRGRPOTrainer` a recipe describes (datasets, rewards and model resolved, inputs checked)."""
    from trl import get_peft_config, get_quantization_config

    from ..data import TOY_PREFIX, resolve_model_name_or_path
    from ..grpo.grpo_trainer import RLVRGRPOTrainer
    from ..rewards import get_reward_func
    from .utils import check_columns, load_train_and_eval, set_model_init_kwargs

    names = script_args.reward_funcs
    if names is None and not script_args.reward_model_name_or_path:
        # No silent default: a reward that does not read the data scores every completion 0 and nothing is learned
        if str(script_args.dataset_name or "").startswith(TOY_PREFIX):
            names = ["toy_accuracy"]
            print(f"reward_funcs not set: using toy_accuracy, the reward of {script_args.dataset_name}.")
        else:
            raise ValueError(
                f"No reward given for the dataset {script_args.dataset_name!r}: set --reward_funcs (e.g. math_accuracy "
                "for math answers in an 'answer' column, reasoning_gym for reasoning_gym: tasks, or an import path "
                "my_pkg.rewards.my_reward) or --reward_model_name_or_path. Only the toy dataset has a default reward "
                "(toy_accuracy): it reads the toy's bracketed answers and scores anything else 0."
            )
    reward_funcs = [get_reward_func(name) for name in names or []]
    if script_args.reward_model_name_or_path:
        reward_funcs.append(script_args.reward_model_name_or_path)
    if not reward_funcs:
        raise ValueError(
            "No reward given: set `reward_funcs` (e.g. ['math_accuracy']) or `reward_model_name_or_path`."
        )

    set_model_init_kwargs(model_args, training_args)
    train_dataset, eval_dataset = load_train_and_eval(
        script_args,
        dataset_args,
        training_args,
        lambda dataset, split: check_columns(dataset, ["prompt"], f"GRPO {split!r}", script_args.dataset_name),
    )

    return RLVRGRPOTrainer(
        model=resolve_model_name_or_path(model_args.model_name_or_path),
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )


def default_off_policy_diagnostics(parsed, explicit: set) -> None:
    """Off-policy diagnostics on for every run that reuses its rollouts, unless the recipe or the command line set the
    flag. The library's default stays False (options off: stock TRL's metrics, to the bit); the command line turns
    it on where the ratios can drift from 1 and the loss has the token-level hard clip the diagnostics measure."""
    import os

    from ..grpo.grpo_config import off_policy_diagnostics_apply
    from ..grpo.signal_check import reuses_rollouts

    training_args = parsed[1]
    if "off_policy_diagnostics" in explicit or training_args.off_policy_diagnostics:
        return
    if not (reuses_rollouts(training_args) and off_policy_diagnostics_apply(training_args)):
        return
    training_args.off_policy_diagnostics = True
    if os.environ.get("RANK", "0") == "0":  # once, not in every process of `accelerate launch`
        print(
            "off_policy_diagnostics on (logs off_policy/*): this run reuses each rollout (num_iterations="
            f"{training_args.num_iterations}, steps_per_generation={training_args.steps_per_generation}, "
            f"gradient_accumulation_steps={training_args.gradient_accumulation_steps}); turn it off with "
            "--off_policy_diagnostics false."
        )


def main(script_args, training_args, model_args, dataset_args):
    from .utils import train_and_save

    return train_and_save(
        build_trainer(script_args, training_args, model_args, dataset_args), script_args, training_args
    )


# The short `--help`: the options most recipes set. A test checks each default against the real dataclass field.
SUMMARY = (
    SummaryOption("model_name_or_path", None, "Hub id, local directory, or 'toy:base' / 'toy:tiny' (built offline)."),
    SummaryOption(
        "dataset_name",
        None,
        "Hub id, local file (.json/.jsonl/.csv/.parquet), save_to_disk folder, or 'toy:arithmetic'.",
    ),
    SummaryOption(
        "reward_funcs",
        None,
        "Reward names (toy_accuracy, math_accuracy, ...) or import paths; required except for toy:arithmetic.",
    ),
    *OUTPUT_AND_LENGTH_SUMMARY,
    SummaryOption("per_device_train_batch_size", 8, "Completions per device per optimiser micro-step."),
    SummaryOption("num_generations", 8, "Completions per prompt (the GRPO group)."),
    SummaryOption("max_completion_length", 512, "Generation budget in tokens."),
    SummaryOption(
        "steps_per_generation",
        None,
        "Optimiser steps per generation batch; above gradient_accumulation_steps the ratio moves and the clip bites.",
        "gradient_accumulation_steps if unset",
    ),
    SummaryOption("loss_type", "dapo", "grpo, dr_grpo, dapo, bnpo, cispo, luspo, ... (TRL's)."),
    SummaryOption("beta", 0.0, "KL coefficient; 0 loads no reference model."),
    SummaryOption("clip_recovery", "none", "Stochastic clip recovery: none (stock TRL), nsr, nsr_expected."),
    SummaryOption("curation", "none", "Online prompt curation: none (stock TRL), self, pass_rate."),
    *LORA_SUMMARY,
    SummaryOption("use_vllm", False, "Generate with vLLM (installed separately)."),
    *DEVICE_SUMMARY,
)

COMMAND = TrainingCommand(
    name="grpo",
    module="trl_rlvr_ext.scripts.grpo",
    description="Train with RLVRGRPOTrainer (TRL's GRPOTrainer + NSR, curation, LoRA initialisers) from a YAML recipe.",
    example_recipe="toy_nsr, grpo/toy_nsr",
    summary=SUMMARY,
    make_parser=lambda prog=None: make_parser(prog),
    main=lambda *parsed: main(*parsed),
    adjust=default_off_policy_diagnostics,
)


def cli_main(argv: list[str] | None = None) -> int:
    """``trl-rlvr-ext grpo [--config RECIPE] [--accelerate_config C] [--num_processes N] [--key value ...]``."""
    return run_training_cli(COMMAND, argv)


if __name__ == "__main__":  # also how `accelerate launch` runs it, in every process
    from .errors import pop_debug_flag, run_reporting_errors

    raise SystemExit(run_reporting_errors("trl-rlvr-ext grpo", cli_main, pop_debug_flag(sys.argv[1:])))
