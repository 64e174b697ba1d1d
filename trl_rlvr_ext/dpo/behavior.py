"""Behaviour-policy log-probabilities for IS-DPO: the dataset columns, their validation, and a scorer.

IS-DAA (https://huggingface.co/papers/2506.08681) weights each preference pair by π_θ/π_D, where π_D is the policy
that generated the pair. When the pairs were sampled from the reference (SFT) model, π_D = π_ref and the trainer
reuses the reference log-probabilities it computes anyway. When they came from another model, add its sequence
log-probabilities as two float columns, ``behavior_chosen_logps`` and ``behavior_rejected_logps``:
`score_behavior_logps` (or ``trl-rlvr-ext score-behavior``) computes them exactly as TRL's `DPOTrainer` computes its
reference log-probabilities (same tokenisation, same collator and truncation, same fused log-prob head), so scoring
with the reference model reproduces TRL's precomputed ``ref_*_logps``.
"""

import math
import os
import types
from collections.abc import Sequence

import torch
from datasets import Dataset, DatasetDict, IterableDataset, load_from_disk
from tqdm.auto import tqdm

from .._trl.ref_logps import dpo_reference_token_logps


BEHAVIOR_CHOSEN_COLUMN = "behavior_chosen_logps"
BEHAVIOR_REJECTED_COLUMN = "behavior_rejected_logps"
BEHAVIOR_COLUMNS = (BEHAVIOR_CHOSEN_COLUMN, BEHAVIOR_REJECTED_COLUMN)

# A sequence log-probability is a sum of log-softmax values, all ≤ 0; allow float rounding of the sum.
_POSITIVE_TOLERANCE = 1e-4
_MAX_ROWS_IN_MESSAGE = 5


# ---------------------------------------------------------------- validation of the columns
def _column_names(dataset) -> list[str]:
    names = dataset.column_names
    if names is None:  # an IterableDataset with unknown features: read the first row
        names = list(next(iter(dataset)).keys())
    return list(names)


def behavior_columns_present(dataset, dataset_name: str = "train") -> bool:
    """Whether ``dataset`` carries both behaviour columns; raises if it carries exactly one of them."""
    names = set(_column_names(dataset))
    present = [column for column in BEHAVIOR_COLUMNS if column in names]
    if len(present) == 1:
        (have,) = present
        (missing,) = [column for column in BEHAVIOR_COLUMNS if column != have]
        raise ValueError(
            f"The {dataset_name} dataset has the column {have!r} but not {missing!r}. IS-DPO needs both behaviour "
            "log-probability columns (the weight multiplies the chosen and rejected ratios), or neither (then the "
            "reference policy is the behaviour policy). Add the missing column, e.g. with "
            "`trl_rlvr_ext.dpo.behavior.score_behavior_logps` / `trl-rlvr-ext score-behavior`, or remove "
            f"{have!r}."
        )
    return len(present) == 2


def _invalid_reason(value) -> str | None:
    """Why one behaviour log-probability is unusable, or None if it is fine (-inf is fine: w is clipped to C)."""
    if value is None:
        return "missing"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"not a number ({type(value).__name__})"
    if math.isnan(value):
        return "NaN"
    if value == math.inf:
        return "+inf"
    if value > _POSITIVE_TOLERANCE:
        return f"{value} > 0 (a log-probability; negative log-likelihoods must be negated)"
    return None


def _raise_invalid(column: str, dataset_name: str, bad: list[tuple[int, str]], where: str = "row") -> None:
    shown = ", ".join(f"{where} {index}: {reason}" for index, reason in bad[:_MAX_ROWS_IN_MESSAGE])
    more = f" (and {len(bad) - _MAX_ROWS_IN_MESSAGE} more)" if len(bad) > _MAX_ROWS_IN_MESSAGE else ""
    raise ValueError(
        f"Column {column!r} of the {dataset_name} dataset has invalid values: {shown}{more}. Behaviour "
        "log-probabilities must be sequence log-prob sums over the completion tokens: finite numbers ≤ 0 (-inf is "
        "allowed: its weight is clipped). Recompute them with `trl_rlvr_ext.dpo.behavior.score_behavior_logps`, or "
        "drop the rows."
    )


def check_behavior_values(values: Sequence, column: str, dataset_name: str = "train", where: str = "row") -> None:
    """Raise a `ValueError` naming the column and the rows whose behaviour log-probability is missing, NaN, +inf or
    positive."""
    bad = [(index, reason) for index, value in enumerate(values) if (reason := _invalid_reason(value)) is not None]
    if bad:
        _raise_invalid(column, dataset_name, bad, where)


def validate_behavior_columns(dataset, dataset_name: str = "train"):
    """Check the behaviour columns of a preference dataset; returns ``(dataset, present)``.

    For a map-style `Dataset` every row is checked now. An `IterableDataset` is checked row by row as it is read (the
    returned dataset raises on the first bad row, naming it).
    """
    present = behavior_columns_present(dataset, dataset_name)
    if not present:
        return dataset, False
    if isinstance(dataset, IterableDataset):

        def check_row(example, index):
            for column in BEHAVIOR_COLUMNS:
                reason = _invalid_reason(example[column])
                if reason is not None:
                    _raise_invalid(column, dataset_name, [(index, reason)])
            return {}

        return dataset.map(check_row, with_indices=True), True
    for column in BEHAVIOR_COLUMNS:
        feature = dataset.features.get(column) if dataset.features is not None else None
        dtype = getattr(feature, "dtype", None)
        if dtype is not None and not dtype.startswith(("float", "int")):
            raise ValueError(
                f"Column {column!r} of the {dataset_name} dataset has type {dtype}; it must hold floats (sequence "
                "log-probabilities). Cast it, e.g. `dataset.cast_column(column, datasets.Value('float64'))`."
            )
        check_behavior_values(list(dataset[column]), column, dataset_name)
    return dataset, True


# ---------------------------------------------------------------- scoring
def _tokenize_like_dpo(dataset: Dataset, tokenizer, dataset_num_proc: int | None) -> Dataset:
    """TRL's own `DPOTrainer._prepare_dataset` (prompt extraction, EOS, tokenisation), without its length filter.

    The method only reads ``self._tokenizer``, so it runs on a stand-in object; no trainer (and no reference model) is
    built. ``max_length=None`` keeps every row, so the scores align with the input rows; rows that training drops
    (prompt alone ≥ max_length) get a finite score that is never used.
    """
    from trl import DPOTrainer

    stand_in = types.SimpleNamespace(_tokenizer=tokenizer)
    args = types.SimpleNamespace(dataset_num_proc=dataset_num_proc, max_length=None, truncation_mode="keep_start")
    return DPOTrainer._prepare_dataset(stand_in, dataset, tokenizer, args, "behavior scoring")


def score_behavior_logps(
    dataset: Dataset,
    model,
    tokenizer,
    batch_size: int = 8,
    max_length: int | None = 1024,
    truncation_mode: str = "keep_start",
    dataset_num_proc: int | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
) -> Dataset:
    """Add ``behavior_chosen_logps`` / ``behavior_rejected_logps`` to a preference dataset by scoring it with ``model``.

    Use it when the pairs were sampled from a model other than the DPO reference: score them with *that* model, then
    train `ISDPOTrainer` on the result. The values are computed exactly as TRL's `DPOTrainer` computes its reference
    log-probabilities, so pass the ``max_length`` / ``truncation_mode`` that training will use (the sums cover the
    completion tokens that survive truncation).

    Args:
        dataset (`datasets.Dataset`):
            Preference dataset (``prompt``/``chosen``/``rejected``, standard or conversational, or an implicit prompt
            with ``chosen``/``rejected`` only), as given to the trainer.
        model (`transformers.PreTrainedModel` or `peft.PeftModel`):
            The behaviour policy (the model that generated the pairs). Scored in eval mode, on its own device.
        tokenizer (`transformers.PreTrainedTokenizerBase`):
            The tokenizer used for training (the chat template matters for conversational data).
        batch_size (`int`): Pairs per forward pass.
        max_length (`int` or `None`): `DPOConfig.max_length` of the training run.
        truncation_mode (`str`): `DPOConfig.truncation_mode` of the training run.
        dataset_num_proc (`int`, *optional*): Processes for tokenisation.
        overwrite (`bool`): Replace existing behaviour columns instead of raising.
        show_progress (`bool`): Show a tqdm progress bar.

    Returns:
        `datasets.Dataset`: ``dataset`` with the two float columns added (one value per row, in order).
    """
    from transformers import PreTrainedTokenizerBase
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    if not isinstance(dataset, Dataset):
        raise TypeError(
            f"score_behavior_logps needs a map-style `datasets.Dataset`, got {type(dataset).__name__}. Score each "
            "split of a DatasetDict separately; materialise a streaming dataset first."
        )
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise TypeError(
            f"score_behavior_logps needs a text tokenizer (PreTrainedTokenizerBase), got {type(tokenizer).__name__}; "
            "vision-language preference data is not supported."
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    missing = [column for column in ("chosen", "rejected") if column not in dataset.column_names]
    if missing:
        raise ValueError(
            f"The dataset has no {missing} column(s); a preference dataset needs 'chosen' and 'rejected' (and "
            f"usually 'prompt'). Its columns are {dataset.column_names}."
        )
    if "image" in dataset.column_names or "images" in dataset.column_names:
        raise ValueError("Vision preference datasets are not supported by score_behavior_logps.")
    existing = [column for column in BEHAVIOR_COLUMNS if column in dataset.column_names]
    if existing:
        if not overwrite:
            raise ValueError(
                f"The dataset already has {existing}. Pass overwrite=True (CLI: --overwrite) to recompute them."
            )
        dataset = dataset.remove_columns(existing)

    prepared = _tokenize_like_dpo(dataset, tokenizer, dataset_num_proc)
    if len(prepared) != len(dataset):  # cannot happen without the length filter; guard the row alignment anyway
        raise RuntimeError(f"Tokenisation changed the number of rows ({len(dataset)} -> {len(prepared)}).")
    prepared = prepared.select_columns(["prompt_ids", "chosen_ids", "rejected_ids"])
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    collator = DataCollatorForPreference(
        pad_token_id=pad_token_id, max_length=max_length, truncation_mode=truncation_mode
    )
    loader = torch.utils.data.DataLoader(prepared, batch_size=batch_size, shuffle=False, collate_fn=collator)

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    chosen_logps, rejected_logps = [], []
    try:
        # As the installed TRL's `DPOTrainer.compute_ref_log_probs`: sum the per-token log-probs of the completions
        with dpo_reference_token_logps(model) as token_logps, torch.no_grad():
            for batch in tqdm(loader, desc="Scoring behaviour log-probs", disable=not show_progress):
                batch = {key: value.to(device) for key, value in batch.items()}
                per_token_logps = token_logps(batch)
                chosen, rejected = per_token_logps.sum(dim=1).float().cpu().chunk(2, dim=0)
                chosen_logps.append(chosen)
                rejected_logps.append(rejected)
    finally:
        model.train(was_training)
    chosen_logps = torch.cat(chosen_logps).tolist()
    rejected_logps = torch.cat(rejected_logps).tolist()
    dataset = dataset.add_column(BEHAVIOR_CHOSEN_COLUMN, chosen_logps)
    return dataset.add_column(BEHAVIOR_REJECTED_COLUMN, rejected_logps)


# ---------------------------------------------------------------- reading and writing (`trl-rlvr-ext score-behavior`)
_FILE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def load_preference_data(path: str) -> Dataset | DatasetDict:
    """A dataset saved with ``save_to_disk`` (a directory) or a ``.json`` / ``.jsonl`` / ``.parquet`` file."""
    if os.path.isdir(path):
        return load_from_disk(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No dataset at {path!r} (expected a save_to_disk directory or a json/parquet file).")
    extension = os.path.splitext(path)[1].lower()
    if extension not in _FILE_FORMATS:
        raise ValueError(
            f"Cannot read {path!r}: use a directory written by `Dataset.save_to_disk`, or a file ending in "
            f"{sorted(_FILE_FORMATS)}."
        )
    return Dataset.from_json(path) if _FILE_FORMATS[extension] == "json" else Dataset.from_parquet(path)


def save_preference_data(dataset: Dataset | DatasetDict, path: str) -> None:
    """Write with ``save_to_disk`` (a directory), or to a ``.json`` / ``.jsonl`` (JSON lines) / ``.parquet`` file."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in _FILE_FORMATS:
        dataset.save_to_disk(path)
        return
    if isinstance(dataset, DatasetDict):
        raise TypeError(
            f"A DatasetDict (splits {list(dataset)}) cannot be written to the single file {path!r}: give a directory "
            "path (save_to_disk), or pick one split with --split."
        )
    if _FILE_FORMATS[extension] == "json":
        dataset.to_json(path, lines=True)
    else:
        dataset.to_parquet(path)
