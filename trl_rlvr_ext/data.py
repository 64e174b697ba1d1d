"""One resolver for the names a user gives: datasets and models.

Every entry point (the training scripts and recipes, ``trl-rlvr-ext eval``/``curate``/``score-behavior``, Python
code) resolves a dataset or model name here, so each accepts the same names:

- ``toy:`` names: the embedded default, built offline (`TOY_DATASETS`, `TOY_MODELS`);
- ``reasoning_gym:<task>[+<task>...][?option=value&...]``: reasoning-gym tasks, generated offline (optional extra
  ``[gym]``; see `trl_rlvr_ext.tasks.reasoning_gym`);
- a local file of a type in `FILE_BUILDERS`, a folder written by ``save_to_disk``, or a folder of data files;
- otherwise a Hugging Face Hub id.

A name that looks local (it has a file extension we read, or a path separator) but does not exist is an error naming
the path, raised before anything is loaded: never a hub lookup after minutes of work.
"""

import os


TOY_PREFIX = "toy:"
REASONING_GYM_PREFIX = "reasoning_gym:"
TOY_MODELS = {
    "toy:base": "the warm-started toy base model (built on first use, then cached)",
    "toy:tiny": "a randomly initialised tiny model (tests, smoke runs)",
}
TOY_DATASETS = {
    "toy:arithmetic": "the toy verifiable arithmetic task (prompt-only, with an 'answer' column; train and test splits)",
    "toy:preference": "toy arithmetic preference pairs (prompt / chosen / rejected; train and test splits)",
}
# The file types every entry point reads, and the `datasets` builder for each.
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}


def _looks_local(name: str) -> bool:
    return (
        os.path.splitext(name)[1].lower() in FILE_BUILDERS
        or name.startswith((".", "/", "~"))
        or name.count(os.sep) > 1  # hub ids have exactly one "/"
    )


def check_dataset_name(name: str) -> None:
    """Fail now, with the fix, if ``name`` cannot name a dataset (an unknown ``toy:`` name, a missing local path)."""
    if not name:
        raise ValueError(
            f"No dataset given: name a hub id, a local file ({'/'.join(sorted(FILE_BUILDERS))}), a save_to_disk "
            f"folder, or one of {sorted(TOY_DATASETS)}."
        )
    if name.startswith(TOY_PREFIX):
        if name not in TOY_DATASETS:
            raise ValueError(f"Unknown toy dataset {name!r}. Use one of {sorted(TOY_DATASETS)}.")
        return
    if name.startswith(REASONING_GYM_PREFIX):
        from .tasks.reasoning_gym import parse_name

        parse_name(name)  # unknown task, bad option or missing extra: fails here, naming the fix
        return
    if os.path.isdir(name):
        return
    if os.path.isfile(name):
        extension = os.path.splitext(name)[1].lower()
        if extension not in FILE_BUILDERS:
            raise ValueError(
                f"Cannot read {name}: use a file of type {sorted(FILE_BUILDERS)} or a folder written by save_to_disk."
            )
        return
    if _looks_local(name):
        raise FileNotFoundError(f"No such dataset file or folder: {os.path.abspath(os.path.expanduser(name))}")


def check_model_name(name: str | None) -> None:
    """Fail now, with the fix, if ``name`` cannot name a model (an unknown ``toy:`` name, a missing local path)."""
    if not name:
        raise ValueError(f"No model given: name a hub id, a local directory, or one of {sorted(TOY_MODELS)}.")
    if name.startswith(TOY_PREFIX):
        if name not in TOY_MODELS:
            raise ValueError(f"Unknown toy model {name!r}. Use one of {sorted(TOY_MODELS)}.")
        return
    if os.path.exists(name):
        if not os.path.isdir(name):
            raise ValueError(f"Model path {name} is a file; give the directory that holds config.json.")
        return
    if _looks_local(name):
        raise FileNotFoundError(f"No such model directory: {os.path.abspath(os.path.expanduser(name))}")


def resolve_model_name_or_path(name_or_path: str | None) -> str:
    """A model path or hub id; ``toy:base`` and ``toy:tiny`` resolve to local directories (built offline)."""
    check_model_name(name_or_path)
    if not name_or_path.startswith(TOY_PREFIX):
        return name_or_path
    if name_or_path == "toy:base":
        from .toy.warmstart import get_base_model_path

        return get_base_model_path()
    from .toy import save_tiny_model
    from .toy.warmstart import default_cache_root

    path = default_cache_root() / "toy" / "tiny-random"
    if not (path / "config.json").is_file():
        save_tiny_model(path)
    return str(path)


def load_dataset_dict(name: str, config: str | None = None, streaming: bool = False):
    """The splits named by ``name``: a `DatasetDict` (or, for a ``save_to_disk`` folder of one split, a `Dataset`).

    A local file is one split, ``train`` (as `datasets.load_dataset` names it).
    """
    import datasets

    check_dataset_name(name)
    if name == "toy:arithmetic":
        from .toy.task import make_task_datasets

        return make_task_datasets()
    if name == "toy:preference":
        from .toy.preference import load_toy_dataset

        return load_toy_dataset(name)
    if name.startswith(REASONING_GYM_PREFIX):
        from .tasks.reasoning_gym import load_reasoning_gym

        return load_reasoning_gym(name)
    if os.path.isdir(name):
        saved = any(os.path.isfile(os.path.join(name, f)) for f in ("dataset_dict.json", "state.json"))
        # A save_to_disk folder, or a folder of data files (datasets infers the splits from the file names).
        return datasets.load_from_disk(name) if saved else datasets.load_dataset(name, streaming=streaming)
    extension = os.path.splitext(name)[1].lower()
    if os.path.isfile(name):
        return datasets.load_dataset(FILE_BUILDERS[extension], data_files=name, streaming=streaming)
    return datasets.load_dataset(name, name=config, streaming=streaming)


def load_split(name: str, split: str = "test", config: str | None = None):
    """One `datasets.Dataset` of ``name``: its ``split``; a single file or single-split folder is used whole."""
    import datasets

    loaded = load_dataset_dict(name, config)
    if isinstance(loaded, datasets.Dataset):
        return loaded
    if os.path.isfile(name) and list(loaded) == ["train"]:
        return loaded["train"]
    if split not in loaded:
        raise ValueError(f"{name} has splits {list(loaded)}, not {split!r}; choose one with --split.")
    return loaded[split]
