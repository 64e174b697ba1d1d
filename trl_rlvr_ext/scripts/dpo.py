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

from ..dpo.behavior import behavior_columns_present
from .utils import get_split, load_script_datasets, resolve_model_name_or_path


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
    import transformers
    from packaging.version import Version
    from trl import get_peft_config, get_quantization_config

    from ..dpo.dpo_trainer import ISDPOTrainer

    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    if training_args.model_init_kwargs is not None:
        model_init_kwargs.update(training_args.model_init_kwargs)
    training_args.model_init_kwargs = model_init_kwargs
    model = resolve_model_name_or_path(model_args.model_name_or_path)

    datasets = load_script_datasets(script_args, dataset_args)
    train_dataset = get_split(datasets, script_args.dataset_train_split, script_args.dataset_name)
    check_preference_dataset(train_dataset, script_args.dataset_train_split)
    eval_dataset = None
    if training_args.eval_strategy != "no":
        eval_dataset = get_split(datasets, script_args.dataset_test_split, script_args.dataset_name)
        check_preference_dataset(eval_dataset, script_args.dataset_test_split)

    trainer = ISDPOTrainer(
        model=model,
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

    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.accelerator.print("✅ Training completed.")

    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(f"💾 Model saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
        trainer.accelerator.print(f"🤗 Model pushed to the Hub in https://huggingface.co/{trainer.hub_model_id}.")

    # Finish the trackers and destroy the process group
    if Version(transformers.__version__) >= Version("5.18.0"):
        trainer.end()
    return trainer


def make_parser(prog: str | None = None):
    from trl import DatasetMixtureConfig, ModelConfig, ScriptArguments, TrlParser

    from ..dpo.dpo_config import ISDPOConfig

    return TrlParser((ScriptArguments, ISDPOConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``trl-rlvr-ext dpo --config recipe.yaml [--key value ...]``; returns 0 once the model is trained and saved.

    Unknown keys in the YAML are an error (a misspelt option must not be silently ignored).
    """
    parser = make_parser(prog="trl-rlvr-ext dpo")
    script_args, training_args, model_args, dataset_args = parser.parse_args_and_config(
        args=argv, fail_with_unknown_args=True
    )
    main(script_args, training_args, model_args, dataset_args)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_main())
