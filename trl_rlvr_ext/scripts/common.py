"""Argument groups shared by the command-line tools (standard library only: ``--help`` imports nothing heavy)."""

import argparse
import sys


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's formatter that appends every option's default, wrapped to the project's 119 columns."""

    def __init__(self, prog, **kwargs):
        super().__init__(prog, width=119, max_help_position=32, **kwargs)


def add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    """The problem-set options shared by ``trl-rlvr-ext eval`` and ``trl-rlvr-ext curate``."""
    parser.add_argument(
        "--dataset",
        required=True,
        help="'toy:arithmetic', a save_to_disk folder, a json/jsonl/parquet/csv file, or a hub name.",
    )
    parser.add_argument("--dataset_config", default=None, help="Hub dataset configuration.")
    parser.add_argument("--prompt_column", default="prompt", help="Column with the problem text.")
    parser.add_argument(
        "--prompt_template",
        default=None,
        help="Build prompts from a str.format template over the columns, e.g. '{problem} Put the answer in "
        "\\boxed{{}}.'",
    )
    parser.add_argument("--chat", action="store_true", help="Send each prompt as one user message (chat template).")


def fail(prog: str, message: str) -> int:
    """Print ``prog: error: message`` on stderr (no traceback) and return the usage-error exit status, 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2
