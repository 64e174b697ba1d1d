"""IS-DPO training script: TRL's `trl/scripts/dpo.py` with `ISDPOTrainer` / `ISDPOConfig`.

```bash
# one process, a packaged recipe (`trl-rlvr-ext recipes` lists them)
trl-rlvr-ext dpo --config toy_isdpo                # or: python -m trl_rlvr_ext.scripts.dpo --config toy_isdpo
# several GPUs / nodes
trl-rlvr-ext dpo --config llama3.2-3b_hh_isdpo --accelerate_config deepspeed_zero3 --num_processes 8
# command-line flags override the YAML
trl-rlvr-ext dpo --config toy_isdpo --model_name_or_path ./tiny --max_steps 5
```

The YAML is flat: keys of TRL's `ScriptArguments`, `ModelConfig`, `DatasetMixtureConfig` and of `ISDPOConfig`
(every `DPOConfig` field plus `importance_sampling`, `importance_weight_cap`, `importance_weight_floor`, ...).
``dataset_name: toy:preference`` builds the offline arithmetic preference dataset of `trl_rlvr_ext.toy.preference`,
``model_name_or_path: toy:tiny`` a tiny random model (no hub access); local files (.json/.jsonl/.csv/.parquet) and
`save_to_disk` directories load too.
"""

import sys
from collections.abc import Sequence

from .launch import (
    DEVICE_SUMMARY,
    LORA_SUMMARY,
    OUTPUT_AND_LENGTH_SUMMARY,
    SummaryOption,
    TrainingCommand,
    run_training_cli,
)


REQUIRED_COLUMNS = ("chosen", "rejected")


def check_preference_dataset(dataset, split: str) -> None:
    """Fail early, with the fix, on a split that is not a preference dataset or has one behaviour column only."""
    if dataset.column_names is None:  # a stream without known features: TRL will check the first row
        return
    missing = [column for column in REQUIRED_COLUMNS if column not in dataset.column_names]
    if missing:
        raise ValueError(
            f"The {split!r} split is not a preference dataset: it has no {missing} column(s) (its columns are "
            f"{dataset.column_names}). DPO needs 'prompt', 'chosen' and 'rejected' (or 'chosen'/'rejected' with the "
            "prompt included, from which TRL extracts the common prefix). Rename the columns, or pick another "
            "dataset or split (`dataset_train_split` / `dataset_test_split`)."
        )
    from ..dpo.behavior import behavior_columns_present

    behavior_columns_present(dataset, repr(split))


def main(script_args, training_args, model_args, dataset_args):
    from trl import get_peft_config, get_quantization_config

    from ..dpo.dpo_trainer import ISDPOTrainer
    from .utils import load_train_and_eval, resolve_model_name_or_path, set_model_init_kwargs, train_and_save

    set_model_init_kwargs(model_args, training_args)
    train_dataset, eval_dataset = load_train_and_eval(
        script_args, dataset_args, training_args, check_preference_dataset
    )
    trainer = ISDPOTrainer(
        model=resolve_model_name_or_path(model_args.model_name_or_path),
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )
    if script_args.ignore_bias_buffers:
        import torch

        # torch distributed hack, as TRL's DPO script
        trainer.model._ddp_params_and_buffers_to_ignore = [
            name for name, buffer in trainer.model.named_buffers() if buffer.dtype == torch.bool
        ]
    return train_and_save(trainer, script_args, training_args)


def make_parser(prog: str | None = None):
    from trl import DatasetMixtureConfig, ModelConfig, ScriptArguments, TrlParser

    from ..dpo.dpo_config import ISDPOConfig

    return TrlParser((ScriptArguments, ISDPOConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


# The short `--help`: the options most recipes set. A test checks each default against the real dataclass field.
SUMMARY = (
    SummaryOption("model_name_or_path", None, "Hub id, local directory, or 'toy:tiny' (built offline)."),
    SummaryOption(
        "dataset_name",
        None,
        "Hub id, local file (.json/.jsonl/.csv/.parquet), save_to_disk folder, or 'toy:preference'.",
    ),
    *OUTPUT_AND_LENGTH_SUMMARY,
    SummaryOption("per_device_train_batch_size", 8, "Preference pairs per device per micro-step."),
    SummaryOption("beta", 0.1, "DPO's beta: higher stays closer to the reference model."),
    SummaryOption("loss_type", ["sigmoid"], "TRL's DPO loss(es): sigmoid (DPO), ipo, hinge, ..."),
    SummaryOption("max_length", 1024, "Tokens per prompt + completion (longer pairs are truncated)."),
    *LORA_SUMMARY,
    *DEVICE_SUMMARY,
)

COMMAND = TrainingCommand(
    name="dpo",
    module="trl_rlvr_ext.scripts.dpo",
    description="Train with ISDPOTrainer (TRL's DPOTrainer + IS-DAA importance weights) from a YAML recipe. The IS "
    "options (importance_sampling and its clip) are listed by --help-all.",
    example_recipe="toy_isdpo, dpo/toy_isdpo",
    summary=SUMMARY,
    make_parser=lambda prog=None: make_parser(prog),
    main=lambda *parsed: main(*parsed),
)


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``trl-rlvr-ext dpo [--config RECIPE] [--accelerate_config C] [--num_processes N] [--key value ...]``; returns 0
    once the model is trained and saved."""
    return run_training_cli(COMMAND, argv)


if __name__ == "__main__":  # also how `accelerate launch` runs it, in every process
    from .errors import pop_debug_flag, run_reporting_errors

    raise SystemExit(run_reporting_errors("trl-rlvr-ext dpo", cli_main, pop_debug_flag(sys.argv[1:])))
