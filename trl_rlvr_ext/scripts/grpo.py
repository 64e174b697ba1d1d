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

    from ..data import resolve_model_name_or_path
    from ..grpo.grpo_trainer import RLVRGRPOTrainer
    from ..rewards import get_reward_func
    from .utils import check_columns, load_train_and_eval, set_model_init_kwargs

    reward_funcs = [get_reward_func(name) for name in script_args.reward_funcs]
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


def main(script_args, training_args, model_args, dataset_args):
    from .utils import train_and_save

    return train_and_save(
        build_trainer(script_args, training_args, model_args, dataset_args), script_args, training_args
    )


def cli_main(argv: list[str] | None = None) -> int:
    from .utils import run_cli

    return run_cli(make_parser, main, argv, prog="trl-rlvr-ext grpo")


if __name__ == "__main__":
    raise SystemExit(cli_main())
