"""``trl-rlvr-ext relex``: fit a recorded RELEX trajectory and write extrapolated checkpoints (arXiv 2605.21468).

Example (a run recorded with ``relex_record_steps: 1``)::

    trl-rlvr-ext relex --trajectory outputs/run/relex_trajectory --history_steps 45 --rank 1 \\
        --target_steps 100,200,300 --output_dir outputs/run/relex
    trl-rlvr-ext eval --model outputs/run/relex/step300 ...

Each tensor is fitted alone and streamed (one tensor's history in memory); ``<output_dir>/step<s>/`` is a model
folder (or a PEFT adapter folder for an adapter trajectory), next to ``variance_report_h<T>_r<r>.json``.
"""

import argparse
import sys

from .common import HelpFormatter, fail


PROG = "trl-rlvr-ext relex"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n")[0].split(": ", 1)[1], formatter_class=HelpFormatter
    )
    parser.add_argument("--trajectory", required=True, help="The trajectory folder (relex_trajectory_dir of the run).")
    parser.add_argument(
        "--history_steps", type=int, required=True, help="T_cut: fit on every recorded step <= this (the authors')."
    )
    parser.add_argument("--rank", type=int, default=1, help="Subspace rank r (paper: 1).")
    parser.add_argument(
        "--target_steps", required=True, help="Comma-separated target step labels, e.g. 100,200 (one folder each)."
    )
    parser.add_argument("--output_dir", required=True, help="Where step<s>/ and the variance report go.")
    parser.add_argument(
        "--mode",
        default="extrapolate",
        choices=["extrapolate", "reconstruct", "fit_reconstruct"],
        help="extrapolate: RELEX; reconstruct: rank-r projection of recorded steps; fit_reconstruct: the fitted line "
        "at history steps.",
    )
    parser.add_argument("--window", type=int, default=-1, help="Fit the last W history steps (-1: all).")
    parser.add_argument(
        "--step_scaling",
        type=float,
        default=1.0,
        help="Target label -> fit-axis step factor (the authors' script uses 2.0 for Qwen2.5-Math-1.5B); explicit, "
        "never inferred.",
    )
    parser.add_argument("--no_progress", action="store_true", help="No progress bar.")
    return parser


def cli_main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        targets = [int(s) for s in args.target_steps.split(",") if s.strip()]
    except ValueError:
        return fail(PROG, f"--target_steps must be comma-separated integers, got {args.target_steps!r}.")
    from ..extrapolation.fit import relex_trajectory

    try:
        report = relex_trajectory(
            args.trajectory,
            args.output_dir,
            args.history_steps,
            targets,
            rank=args.rank,
            mode=args.mode,
            window=args.window,
            step_scaling=args.step_scaling,
            progress=not args.no_progress,
        )
    except (ValueError, FileNotFoundError) as error:
        return fail(PROG, str(error))
    summary = report["summary"]
    print("  ".join(f"{k}={v:.4f}" for k, v in summary.items()))
    print(f"wrote {', '.join(f'step{s}' for s in targets)} and {report['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
