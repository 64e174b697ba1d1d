"""``trl-rlvr-ext eval``: Pass@k of one or more models (or checkpoints) on a problem set, as JSON and a PNG plot.

Example (offline, the toy task)::

    trl-rlvr-ext eval --model toy:base outputs/toy_self/checkpoint-200 --dataset toy:arithmetic --split test \\
        --reward_funcs toy_accuracy --num_samples 64 --temperature 1.0 --max_new_tokens 8 --output_dir eval

Every model, the dataset and the reward functions are checked before anything is generated; each model's result is
added to ``pass_at_k.json`` as soon as it is done, and a model that fails is reported without losing the others.
"""

import argparse
import os
import sys

from .._io import atomic_target
from .common import (
    HelpFormatter,
    add_problem_arguments,
    add_sampling_arguments,
    fail,
    load_problem_set,
    sampling_settings,
)


PROG = "trl-rlvr-ext eval"


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n")[0].split(": ", 1)[1], formatter_class=HelpFormatter
    )
    parser.add_argument(
        "--model", nargs="+", required=True, help="Model paths, hub ids or 'toy:base' / 'toy:tiny' (one curve each)."
    )
    parser.add_argument("--labels", nargs="+", default=None, help="Curve names (default: the model paths).")
    add_problem_arguments(parser)
    parser.add_argument(
        "--split",
        default=None,
        help="Dataset split (default: 'test' of a dataset with splits; all rows of a single file, which has none).",
    )
    parser.add_argument(
        "--reward_funcs",
        nargs="+",
        required=True,
        help="Reward functions that grade a sample (all must reach the threshold): toy_accuracy, math_accuracy, "
        "TRL's accuracy_reward, ..., or an import path pkg.module.func.",
    )
    # the papers' settings: temperature 0.6, top-p 0.95
    add_sampling_arguments(parser, num_samples=16, temperature=0.6, top_p=0.95)
    parser.add_argument("--ks", type=int, nargs="+", default=None, help="k's to report (None: 1, 2, 4, ..., n).")
    parser.add_argument("--num_problems", type=int, default=None, help="Evaluate only the first N problems.")
    parser.add_argument(
        "--answer_extractor",
        default="auto",
        choices=["auto", "toy", "math", "none"],
        help="How maj@k reads a sample's final answer: auto picks it from the reward function (toy_accuracy -> toy, "
        "math_accuracy / accuracy_reward -> math); none skips maj@k.",
    )
    parser.add_argument(
        "--confidence_level",
        type=float,
        default=0.95,
        help="Level of the percentile-bootstrap intervals over problems (drawn as bands); 0 turns them off.",
    )
    parser.add_argument("--bootstrap_resamples", type=int, default=1000, help="Bootstrap resamples of the problems.")
    parser.add_argument(
        "--plot_metric",
        default="pass@",
        choices=["pass@", "pass^", "maj@"],
        help="The curve to plot: pass@k (any of k correct), pass^k (all k correct) or maj@k (majority vote correct).",
    )
    parser.add_argument("--output_dir", default="pass_at_k", help="Where pass_at_k.json and pass_at_k.png go.")
    parser.add_argument("--no_plot", action="store_true", help="Write the JSON only.")
    return parser


def _save_atomically(results, path: str) -> None:
    from ..evaluation.evaluator import save_results

    with atomic_target(path) as tmp:  # a reader never sees a half-written file
        save_results(results, tmp)


def cli_main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if not (args.confidence_level == 0 or 0 < args.confidence_level < 1):
        return fail(PROG, f"--confidence_level must be in (0, 1), or 0 for no intervals; got {args.confidence_level}.")
    if args.bootstrap_resamples < 1:
        return fail(PROG, f"--bootstrap_resamples must be at least 1, got {args.bootstrap_resamples}.")
    try:
        sampling = sampling_settings(args)
    except (ValueError, TypeError) as error:
        return fail(PROG, str(error))
    if args.labels is not None and len(args.labels) != len(args.model):
        return fail(PROG, f"--labels needs one name per --model ({len(args.model)}), got {len(args.labels)}.")
    if not args.no_plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            return fail(
                PROG,
                "the plot needs matplotlib, which is not installed: `pip install 'matplotlib>=3.8'` (in a clone: "
                "`pip install -e '.[plot]'`), or pass --no_plot to write the JSON only.",
            )
    from .utils import check_model_name_or_path

    # Everything that can be checked is checked before the first sample is drawn.
    for model in args.model:
        try:
            check_model_name_or_path(model)
        except (ValueError, FileNotFoundError, ConnectionError) as error:
            return fail(PROG, str(error))
    try:
        dataset, reward_funcs = load_problem_set(args)
    except (ValueError, FileNotFoundError, ImportError) as error:
        return fail(PROG, str(error))
    os.makedirs(args.output_dir, exist_ok=True)
    json_path = os.path.join(args.output_dir, "pass_at_k.json")

    from ..evaluation.evaluator import evaluate_pass_at_k
    from .utils import resolve_model_name_or_path

    results, failures = [], []
    for i, model in enumerate(args.model):
        label = args.labels[i] if args.labels else model
        try:
            result = evaluate_pass_at_k(
                resolve_model_name_or_path(model),
                dataset,
                reward_funcs,
                ks=args.ks,
                correct_threshold=args.correct_threshold,
                batch_size=args.batch_size,
                use_vllm=args.use_vllm,
                vllm_kwargs=args.vllm_kwargs,
                sampling=sampling,
                num_problems=args.num_problems,
                label=label,
                answer_extractor=None if args.answer_extractor == "none" else args.answer_extractor,
                confidence_level=args.confidence_level or None,
                bootstrap_resamples=args.bootstrap_resamples,
            )
        except Exception as error:  # noqa: BLE001 -- one model's failure must not discard the others' results
            failures.append(label)
            print(f"{PROG}: {label}: failed: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        results.append(result)
        _save_atomically(results, json_path)
        summary = "  ".join(f"pass@{k}={v:.4f}" for k, v in result.pass_at_k.items())
        if result.pass_hat_k:
            summary += "  " + "  ".join(f"pass^{k}={v:.4f}" for k, v in result.pass_hat_k.items())
        if result.maj_at_k:
            summary += "  " + "  ".join(f"maj@{k}={v:.4f}" for k, v in result.maj_at_k.items())
        # Fractions, as the API and the JSON hold them
        print(f"{result.label}: {summary}  (saved to {json_path})", flush=True)
    if results and not args.no_plot:
        from ..evaluation.plotting import plot_pass_at_k

        png_path = plot_pass_at_k(results, os.path.join(args.output_dir, "pass_at_k.png"), metric=args.plot_metric)
        print(f"wrote {png_path}")
    if failures:
        kept = f"; the results of the others are in {json_path}" if results else ""
        print(f"{PROG}: {len(failures)} of {len(args.model)} models failed: {failures}{kept}.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
