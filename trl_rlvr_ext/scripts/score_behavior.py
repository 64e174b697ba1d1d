"""``trl-rlvr-ext score-behavior``: add behaviour-policy log-probabilities to a preference dataset for IS-DPO.

    trl-rlvr-ext score-behavior --model_name_or_path <the model that sampled the pairs> --dataset_path pairs.jsonl \\
        --output_path pairs_scored.jsonl --max_length 1024

The model, the dataset, the output path and the columns are checked before the model is loaded. A dataset with several
splits written to a directory is saved split by split as each finishes (the ``save_to_disk`` layout of a
`DatasetDict`), so a failure in one split keeps the others. See `trl_rlvr_ext.dpo.behavior.score_behavior_logps`.
"""

import argparse
import json
import os
import sys
from collections.abc import Sequence

from .common import HelpFormatter, fail


PROG = "trl-rlvr-ext score-behavior"
_FILE_EXTENSIONS = (".json", ".jsonl", ".parquet")


def make_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or PROG,
        description="Add behaviour-policy log-prob columns (behavior_chosen_logps, behavior_rejected_logps) to a "
        "preference dataset for IS-DPO, by scoring it with the model that generated the pairs.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model_name_or_path", required=True, help="The behaviour model (path or hub id).")
    parser.add_argument(
        "--dataset_path", required=True, help="Dataset: a save_to_disk directory or a .json/.jsonl/.parquet file."
    )
    parser.add_argument(
        "--output_path",
        required=True,
        help="Where to write: a directory (save_to_disk) or a .json/.jsonl/.parquet file.",
    )
    parser.add_argument("--batch_size", type=int, default=8, help="Pairs per forward pass.")
    parser.add_argument("--tokenizer_name_or_path", default=None, help="Tokenizer (None: the model's).")
    parser.add_argument("--split", default=None, help="Score only this split of a DatasetDict (None: all).")
    parser.add_argument(
        "--max_length", type=int, default=1024, help="DPOConfig.max_length of the training run (0: no truncation)."
    )
    parser.add_argument(
        "--truncation_mode", default="keep_start", choices=["keep_start", "keep_end"], help="As DPOConfig."
    )
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"], help="Model dtype."
    )
    parser.add_argument("--device", default=None, help="Device for the model (None: cuda if available, else cpu).")
    parser.add_argument("--dataset_num_proc", type=int, default=None, help="Processes for tokenisation.")
    parser.add_argument("--trust_remote_code", action="store_true", help="Allow custom model code from the Hub.")
    parser.add_argument("--overwrite", action="store_true", help="Recompute existing behaviour columns.")
    return parser


def _check_inputs(args, data) -> str | None:
    """Why the run cannot succeed, found before the model is loaded (None when it can)."""
    from datasets import DatasetDict

    from ..dpo.behavior import BEHAVIOR_COLUMNS

    writes_a_file = os.path.splitext(args.output_path)[1].lower() in _FILE_EXTENSIONS
    if isinstance(data, DatasetDict) and writes_a_file:
        return (
            f"the dataset has several splits {list(data)}, which cannot go into the single file {args.output_path!r}: "
            "give a directory as --output_path (save_to_disk), or pick one split with --split."
        )
    parts = data.items() if isinstance(data, DatasetDict) else [(None, data)]
    for split, part in parts:
        where = f"split {split!r} of {args.dataset_path}" if split else args.dataset_path
        missing = [column for column in ("chosen", "rejected") if column not in part.column_names]
        if missing:
            return (
                f"{where} has no {missing} column(s); a preference dataset needs 'chosen' and 'rejected' (and "
                f"usually 'prompt'). Its columns are {part.column_names}."
            )
        existing = [column for column in BEHAVIOR_COLUMNS if column in part.column_names]
        if existing and not args.overwrite:
            return f"{where} already has {existing}. Pass --overwrite to recompute them."
    return None


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``trl-rlvr-ext score-behavior --model_name_or_path M --dataset_path D --output_path O [--batch_size N]``."""
    args = make_parser().parse_args(argv)
    if args.max_length is not None and args.max_length <= 0:
        args.max_length = None
    from .utils import check_model_name_or_path

    try:
        check_model_name_or_path(args.model_name_or_path)
        if args.tokenizer_name_or_path is not None:
            check_model_name_or_path(args.tokenizer_name_or_path)
    except (ValueError, FileNotFoundError, ConnectionError) as error:
        return fail(PROG, str(error))

    from datasets import DatasetDict

    from ..dpo.behavior import BEHAVIOR_COLUMNS, load_preference_data, save_preference_data, score_behavior_logps

    try:
        data = load_preference_data(args.dataset_path)
    except (ValueError, FileNotFoundError, ConnectionError) as error:
        return fail(PROG, str(error))
    if args.split is not None:
        if not isinstance(data, DatasetDict) or args.split not in data:
            splits = list(data) if isinstance(data, DatasetDict) else "none (a single Dataset)"
            return fail(PROG, f"--split {args.split!r} not found; the dataset's splits are {splits}.")
        data = data[args.split]
    if (problem := _check_inputs(args, data)) is not None:
        return fail(PROG, problem)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .utils import resolve_model_name_or_path

    model_path = resolve_model_name_or_path(args.model_name_or_path)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype if args.dtype == "auto" else getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, trust_remote_code=args.trust_remote_code)
    model = model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model_name_or_path(args.tokenizer_name_or_path or args.model_name_or_path),
        trust_remote_code=args.trust_remote_code,
    )
    kwargs = {
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "truncation_mode": args.truncation_mode,
        "dataset_num_proc": args.dataset_num_proc,
        "overwrite": args.overwrite,
    }
    if not isinstance(data, DatasetDict):
        save_preference_data(score_behavior_logps(data, model, tokenizer, **kwargs), args.output_path)
        print(f"Wrote {args.output_path} with columns {list(BEHAVIOR_COLUMNS)}.")
        return 0
    # Split by split, each saved as soon as it is scored, in `DatasetDict.save_to_disk`'s layout
    os.makedirs(args.output_path, exist_ok=True)
    for split, part in data.items():
        score_behavior_logps(part, model, tokenizer, **kwargs).save_to_disk(os.path.join(args.output_path, split))
        print(f"Wrote split {split!r} to {os.path.join(args.output_path, split)}.", flush=True)
    with open(os.path.join(args.output_path, "dataset_dict.json"), "w") as f:
        json.dump({"splits": list(data)}, f)
    print(f"Wrote {args.output_path} (splits {list(data)}) with columns {list(BEHAVIOR_COLUMNS)}.")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
