"""Train with `RLVRGRPOTrainer` from a flat YAML recipe.

    python -m trl_rlvr_ext.scripts.grpo --config recipes/grpo/toy_nsr.yaml [--key value ...]
    accelerate launch --config_file recipes/accelerate_configs/multi_gpu.yaml -m trl_rlvr_ext.scripts.grpo --config ...
    trl-rlvr-ext grpo --config recipes/grpo/toy_nsr.yaml

Every key of the YAML is a field of `RLVRGRPOScriptArguments`, `RLVRGRPOConfig`, TRL's `ModelConfig` or
`DatasetMixtureConfig`; command-line flags override the YAML (TRL's `TrlParser`).
"""

from dataclasses import dataclass, field

from trl import ScriptArguments

from ..rewards import REWARD_NAMES


@dataclass
class RLVRGRPOScriptArguments(ScriptArguments):
    """Script arguments of the GRPO script: TRL's `ScriptArguments` plus the reward functions."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["toy_accuracy"],
        metadata={
            "help": f"Reward functions: names among {list(REWARD_NAMES)} or dotted import paths "
            "('my_lib.rewards.my_reward'). 'math_accuracy' grades math answers with math-verify."
        },
    )
    reward_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Optional reward model (hub id or local path), used in addition to `reward_funcs`."},
    )


def make_parser(prog: str | None = None):
    from trl import DatasetMixtureConfig, ModelConfig, TrlParser

    from ..grpo.grpo_config import RLVRGRPOConfig

    return TrlParser((RLVRGRPOScriptArguments, RLVRGRPOConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def build_trainer(script_args, training_args, model_args, dataset_args):
    """The `RLVRGRPOTrainer` a recipe describes (datasets, rewards and model resolved, inputs checked)."""
    from trl import get_peft_config, get_quantization_config

    from ..grpo.grpo_trainer import RLVRGRPOTrainer
    from ..rewards import get_reward_func
    from .utils import check_columns, get_split, load_script_datasets, resolve_model_name_or_path

    reward_funcs = [get_reward_func(name) for name in script_args.reward_funcs]
    if script_args.reward_model_name_or_path:
        reward_funcs.append(script_args.reward_model_name_or_path)
    if not reward_funcs:
        raise ValueError("No reward given: set `reward_funcs` (e.g. ['math_accuracy']) or `reward_model_name_or_path`.")

    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    model_init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = model_init_kwargs

    datasets = load_script_datasets(script_args, dataset_args)
    train_dataset = get_split(datasets, script_args.dataset_train_split, script_args.dataset_name)
    check_columns(train_dataset, ["prompt"], "GRPO training", script_args.dataset_name)
    eval_dataset = None
    if training_args.eval_strategy != "no":
        eval_dataset = get_split(datasets, script_args.dataset_test_split, script_args.dataset_name)
        check_columns(eval_dataset, ["prompt"], "GRPO evaluation", script_args.dataset_name)

    return RLVRGRPOTrainer(
        model=resolve_model_name_or_path(model_args.model_name_or_path),
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )


def main(script_args, training_args, model_args, dataset_args):
    trainer = build_trainer(script_args, training_args, model_args, dataset_args)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
    trainer.end()
    return trainer


def cli_main(argv: list[str] | None = None) -> int:
    parser = make_parser(prog="trl-rlvr-ext grpo")
    script_args, training_args, model_args, dataset_args = parser.parse_args_and_config(
        args=argv, fail_with_unknown_args=True
    )
    main(script_args, training_args, model_args, dataset_args)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_main())
