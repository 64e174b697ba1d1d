"""What the training scripts share: dataset and model resolution (including the offline ``toy:`` names) and
input checks that fail early with a clear message instead of a traceback from deep inside TRL."""

import os
import re
from collections.abc import Sequence

from datasets import Dataset, DatasetDict, IterableDataset, load_dataset, load_from_disk


TOY_PREFIX = "toy:"
TOY_MODELS = {
    "toy:base": "the warm-started toy base model (built on first use, then cached)",
    "toy:tiny": "a randomly initialised tiny model (tests, smoke runs)",
}
TOY_DATASETS = {
    "toy:arithmetic": "the toy verifiable arithmetic task (prompt-only, with an 'answer' column)",
    "toy:preference": "toy arithmetic preference pairs (prompt / chosen / rejected)",
}
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def resolve_model_name_or_path(name_or_path: str | None) -> str:
    """A model path or hub id; ``toy:base`` and ``toy:tiny`` resolve to local directories (built offline)."""
    if not name_or_path:
        raise ValueError("No model given: set `model_name_or_path` (a hub id, a local directory, or 'toy:base').")
    if not name_or_path.startswith(TOY_PREFIX):
        return name_or_path
    if name_or_path == "toy:base":
        from ..toy.warmstart import get_base_model_path

        return get_base_model_path()
    if name_or_path == "toy:tiny":
        from ..toy import save_tiny_model
        from ..toy.warmstart import default_cache_root

        path = default_cache_root() / "toy" / "tiny-random"
        if not (path / "config.json").is_file():
            save_tiny_model(path)
        return str(path)
    raise ValueError(f"Unknown toy model {name_or_path!r}. Use one of {sorted(TOY_MODELS)}.")


# "name" or "org/name": what a hub model id looks like (a path with more parts, or starting with . / ~, cannot be one)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_MODEL_FILES = ("config.json", "adapter_config.json")


def check_model_name_or_path(name_or_path: str) -> None:
    """Fail at once, naming ``name_or_path``, when it is not a usable model: an unknown ``toy:`` name, a missing local
    path, a directory without a saved model, or (offline) a hub id that is not in the local cache.

    Cheap (no model is loaded): the command-line tools call it for every model before generating anything.
    """
    if not name_or_path:
        raise ValueError("No model given: pass a hub id, a local directory, or 'toy:base'.")
    if name_or_path.startswith(TOY_PREFIX):
        if name_or_path not in TOY_MODELS:
            raise ValueError(f"Unknown toy model {name_or_path!r}. Use one of {sorted(TOY_MODELS)}.")
        return
    path = os.path.expanduser(name_or_path)
    if os.path.isdir(path):
        if not any(os.path.isfile(os.path.join(path, name)) for name in _MODEL_FILES):
            raise ValueError(
                f"Model {name_or_path!r} is a directory without a saved model (no config.json or adapter_config.json). "
                "Point to the folder that `save_pretrained` / `trainer.save_model` wrote: a run's output_dir or one of "
                "its checkpoint-N folders."
            )
        return
    if os.path.exists(path):
        raise ValueError(f"Model {name_or_path!r} is a file; give the directory that holds config.json.")
    if not _HUB_ID.match(name_or_path):
        raise FileNotFoundError(
            f"Model {name_or_path!r}: no such directory (relative to {os.getcwd()}), and it is not a hub id "
            "('name' or 'org/name'). Check the path."
        )
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name_or_path, "config.json"), str):
        return
    if constants.HF_HUB_OFFLINE:
        raise FileNotFoundError(
            f"Model {name_or_path!r}: no such directory (relative to {os.getcwd()}), and as a hub id it is not in the "
            "local cache while HF_HUB_OFFLINE=1. If it is a path, check it; if it is a hub model, download it first "
            "(`hf download <id>`) or unset HF_HUB_OFFLINE."
        )
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        HfApi().model_info(name_or_path)
    except GatedRepoError:  # exists; loading it needs a token, which `from_pretrained` reports itself
        return
    except RepositoryNotFoundError:
        raise FileNotFoundError(
            f"Model {name_or_path!r}: no such directory (relative to {os.getcwd()}), and no such model on the hub "
            "(or it is private: log in with `hf auth login`)."
        ) from None


def load_named_dataset(name: str, config: str | None = None, streaming: bool = False):
    """A `DatasetDict` from a ``toy:`` name, a local file (.json/.jsonl/.csv/.parquet), a directory saved with
    `save_to_disk`, or a hub dataset (``load_dataset``)."""
    if name.startswith(TOY_PREFIX):
        if name == "toy:arithmetic":
            from ..toy.task import make_task_datasets

            return make_task_datasets()
        if name == "toy:preference":
            from ..toy.preference import load_toy_dataset

            return load_toy_dataset(name)
        raise ValueError(f"Unknown toy dataset {name!r}. Use one of {sorted(TOY_DATASETS)}.")
    extension = os.path.splitext(name)[1].lower()
    if os.path.isfile(name) and extension in _FILE_BUILDERS:
        return load_dataset(_FILE_BUILDERS[extension], data_files=name, streaming=streaming)
    if os.path.isdir(name) and os.path.isfile(os.path.join(name, "dataset_dict.json")):
        return load_from_disk(name)
    return load_dataset(name, name=config, streaming=streaming)


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
    """Train (resuming if asked), save the model, push it if asked, and close the trackers."""
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
        trainer.accelerator.print(f"Model pushed to the Hub: https://huggingface.co/{trainer.hub_model_id}.")
    trainer.end()  # finishes the trackers and destroys the process group (transformers >= 5.18)
    return trainer
