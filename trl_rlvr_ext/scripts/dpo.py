"""IS-DPO training script: TRL's `trl/scripts/dpo.py` with `ISDPOTrainer` / `ISDPOConfig`.

```bash
# one process
python -m trl_rlvr_ext.scripts.dpo --config recipes/dpo/toy_isdpo.yaml
# several GPUs / nodes
accelerate launch --config_file recipes/accelerate_configs/multi_gpu.yaml \
    -m trl_rlvr_ext.scripts.dpo --config recipes/dpo/llama3.2-3b_hh_isdpo.yaml
# command-line flags override the YAML
python -m trl_rlvr_ext.scripts.dpo --config recipes/dpo/toy_isdpo.yaml --model_name_or_path ./tiny --max_steps 5
```

The YAML is flat: keys of TRL's `ScriptArguments`, `ModelConfig`, `DatasetMixtureConfig` and of `ISDPOConfig`
(every `DPOConfig` field plus `importance_sampling`, `is_weight_max`). ``dataset_name: toy:preference`` builds the
offline arithmetic preference dataset of `trl_rlvr_ext.toy.preference`, ``model_name_or_path: toy:tiny`` a tiny
random model (no hub access); local files (.json/.jsonl/.csv/.parquet) and `save_to_disk` directories load too.
"""

from collections.abc import Sequence

from ..data import resolve_model_name_or_path
from ..dpo.behavior import behavior_columns_present
from .utils import load_train_and_eval, run_cli, set_model_init_kwargs, train_and_save


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
    behavior_columns_present(dataset, repr(split))


def main(script_args, training_args, model_args, dataset_args):
    from trl import get_peft_config, get_quantization_config

    from ..dpo.dpo_trainer import ISDPOTrainer

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


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``trl-rlvr-ext dpo --config recipe.yaml [--key value ...]``; returns 0 once the model is trained and saved."""
    return run_cli(make_parser, main, argv, prog="trl-rlvr-ext dpo")


if __name__ == "__main__":
    raise SystemExit(cli_main())
