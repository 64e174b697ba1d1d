"""``trl-rlvr-ext curate``: score a dataset's prompts with a model (k samples + one greedy decode), then filter them.

    trl-rlvr-ext curate --model toy:base --dataset toy:arithmetic --split train --reward_funcs toy_accuracy \\
        --num_samples 8 --max_new_tokens 8 --output_dir curated --min_pass_rate 0.125 --max_pass_rate 0.875

The model, the dataset and the reward functions are checked before anything is generated. Scores are written shard by
shard (`trl_rlvr_ext.curation.offline.score_dataset`): rerunning the same command resumes; a rerun with other settings
into the same ``--output_dir`` stops at once and says which option differs.
"""

import argparse
import os
import sys

from .common import (
    HelpFormatter,
    add_problem_arguments,
    add_sampling_arguments,
    fail,
    load_problem_set,
    sampling_settings,
)


PROG = "trl-rlvr-ext curate"

# setting saved in curate_meta.json -> the options that set it
_SETTING_OPTIONS = {
    "model": "--model",
    "num_rows": "--dataset / --split / --num_problems",
    "dataset_fingerprint": "--dataset / --dataset_config / --split / --prompt_column / --prompt_template / --chat",
    "num_samples": "--num_samples",
    "temperature": "--temperature",
    "top_p": "--top_p",
    "max_new_tokens": "--max_new_tokens",
    "correct_threshold": "--correct_threshold",
    "shard_size": "--shard_size",
    "seed": "--seed",
    "reward_funcs": "--reward_funcs",
}


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog=PROG,
        description="Score prompts with a model (k samples + greedy) and filter them by pass rate / greedy answer.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model", required=True, help="Model path, hub id, or 'toy:base' / 'toy:tiny'.")
    add_problem_arguments(parser)
    parser.add_argument("--split", default="train", help="Dataset split.")
    parser.add_argument(
        "--reward_funcs", nargs="+", required=True, help="Reward functions (names or import paths), as for eval."
    )
    parser.add_argument("--output_dir", required=True, help="Shards, settings, scored/ and filtered/ go here.")
    add_sampling_arguments(parser, num_samples=8, temperature=1.0, top_p=1.0)
    parser.add_argument("--shard_size", type=int, default=256, help="Prompts per shard (the resumable unit).")
    parser.add_argument("--num_problems", type=int, default=None, help="Score only the first N prompts.")
    parser.add_argument("--min_pass_rate", type=float, default=None, help="Keep pass_rate >= this.")
    parser.add_argument("--max_pass_rate", type=float, default=None, help="Keep pass_rate <= this.")
    parser.add_argument("--drop_greedy_correct", action="store_true", help="Keep only greedily unsolved prompts.")
    return parser


def settings_clash_message(error) -> str:
    """What differs between a saved curate run and this one, by command-line option, and the two ways out."""
    lines = [f"{error.output_dir} holds scores made with other settings:"]
    for key, (saved, new) in error.differences.items():
        lines.append(f"  {_SETTING_OPTIONS.get(key, key)}: {saved!r} there, {new!r} now")
    lines.append(
        "To start fresh, pass another --output_dir (or delete this one). To resume it, rerun with the settings it was "
        f"made with (saved in {os.path.join(error.output_dir, 'curate_meta.json')})."
    )
    return "\n".join(lines)


def cli_main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    from .utils import check_model_name_or_path

    try:
        check_model_name_or_path(args.model)
        sampling = sampling_settings(args)
    except (ValueError, TypeError, FileNotFoundError, ConnectionError) as error:
        return fail(PROG, str(error))

    import numpy as np

    from ..curation.offline import CurationSettingsError, filter_scored, score_dataset
    from .utils import resolve_model_name_or_path

    try:
        dataset, reward_funcs = load_problem_set(args)
    except (ValueError, FileNotFoundError, ImportError) as error:
        return fail(PROG, str(error))
    if args.num_problems is not None:
        dataset = dataset.select(range(min(args.num_problems, len(dataset))))
    try:
        scored = score_dataset(
            resolve_model_name_or_path(args.model),
            dataset,
            reward_funcs,
            args.output_dir,
            correct_threshold=args.correct_threshold,
            shard_size=args.shard_size,
            batch_size=args.batch_size,
            use_vllm=args.use_vllm,
            vllm_kwargs=args.vllm_kwargs,
            sampling=sampling,
        )
    except CurationSettingsError as error:
        return fail(PROG, settings_clash_message(error))
    filtered = filter_scored(scored, args.min_pass_rate, args.max_pass_rate, args.drop_greedy_correct)
    filtered.save_to_disk(os.path.join(args.output_dir, "filtered"))
    rates = np.asarray(scored["pass_rate"])
    print(
        f"scored {len(scored)} prompts: mean pass rate {rates.mean():.3f}, unsolved {np.mean(rates == 0):.3f}, "
        f"always solved {np.mean(rates == 1):.3f}, greedy correct {np.mean(scored['greedy_correct']):.3f} (fractions); "
        f"kept {len(filtered)} -> {os.path.join(args.output_dir, 'filtered')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
