"""What the training scripts share: reading TRL's dataset options, input checks that fail early with a clear message
instead of a traceback from deep inside TRL, and training + saving. Names of models and datasets (including the
offline ``toy:`` names) resolve in `trl_rlvr_ext.data`."""

from collections.abc import Sequence

from datasets import Dataset, DatasetDict, IterableDataset

from ..data import (  # noqa: F401 -- re-exported: the scripts' names since the first release
    TOY_DATASETS,
    TOY_MODELS,
    TOY_PREFIX,
    check_model_name_or_path,
    load_named_dataset,
    resolve_model_name_or_path,
)


def load_script_datasets(script_args, dataset_args):
    """The datasets named by TRL's `ScriptArguments` / `DatasetMixtureConfig` (as TRL's scripts resolve them)."""
    if dataset_args is not None and dataset_args.datasets:
        from trl import get_dataset

        return get_dataset(dataset_args)
    if not script_args.dataset_name:
        raise ValueError(
            "No dataset given: set `dataset_name` (a hub id, a local file or directory, or one of "
            f"{sorted(TOY_DATASETS)}) or `datasets` (a dataset mixture)."
        )
    return load_named_dataset(script_args.dataset_name, script_args.dataset_config, script_args.dataset_streaming)


def get_split(datasets, split: str, dataset_name: str | None = None):
    if isinstance(datasets, Dataset | IterableDataset):
        return datasets
    if split not in datasets:
        raise ValueError(
            f"Dataset {dataset_name or ''!s} has no split {split!r}; it has {list(datasets)}. Set "
            "`dataset_train_split` / `dataset_test_split` to one of them."
        )
    return datasets[split]


def check_columns(dataset, required: Sequence[str], purpose: str, dataset_name: str | None = None) -> None:
    """Fail with a clear message when ``dataset`` lacks a column the trainer needs."""
    columns = (
        dataset.column_names if not isinstance(dataset, DatasetDict) else next(iter(dataset.values())).column_names
    )
    if columns is None:  # streaming datasets may not know their columns up front
        return
    missing = [c for c in required if c not in columns]
    if missing:
        raise ValueError(
            f"The {purpose} dataset{f' {dataset_name!r}' if dataset_name else ''} has no column(s) {missing}; it has "
            f"{columns}. {purpose.capitalize()} needs {list(required)}: rename the columns (e.g. with "
            "`dataset.rename_column`) or pick another dataset."
        )


def set_model_init_kwargs(model_args, training_args) -> None:
    """Fold TRL's `ModelConfig` loading options into ``training_args.model_init_kwargs`` (as TRL's scripts do);
    explicit ``model_init_kwargs`` win."""
    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    model_init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = model_init_kwargs


def load_train_and_eval(script_args, dataset_args, training_args, check):
    """The train split, and the eval split when evaluation is on, each passed through ``check(dataset, split)``."""
    datasets = load_script_datasets(script_args, dataset_args)
    train_dataset = get_split(datasets, script_args.dataset_train_split, script_args.dataset_name)
    check(train_dataset, script_args.dataset_train_split)
    eval_dataset = None
    if training_args.eval_strategy != "no":
        eval_dataset = get_split(datasets, script_args.dataset_test_split, script_args.dataset_name)
        check(eval_dataset, script_args.dataset_test_split)
    return train_dataset, eval_dataset


def train_and_save(trainer, script_args, training_args):
    """Train (resuming if asked), save the model, push it if asked, and close the trackers; the console shows a short
    line per logging step, every metric goes to ``<output_dir>/train_log.jsonl``."""
    from .console import use_concise_console

    use_concise_console(trainer, training_args.output_dir)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
        trainer.accelerator.print(f"Model pushed to the Hub: https://huggingface.co/{trainer.hub_model_id}.")
    trainer.end()  # finishes the trackers and destroys the process group (transformers >= 5.18)
    # The training-signal check's warnings scroll away under the step logs: repeat them last
    for warning in getattr(trainer, "signal_check_warnings", []):
        trainer.accelerator.print(f"warning: {warning}")
    return trainer
