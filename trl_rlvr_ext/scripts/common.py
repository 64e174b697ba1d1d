"""Argument groups shared by the command-line tools (standard library only: ``--help`` imports nothing heavy)."""

import argparse
import json
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


def add_sampling_arguments(
    parser: argparse.ArgumentParser, num_samples: int, temperature: float, top_p: float
) -> None:
    """The sampling and grading options shared by ``trl-rlvr-ext eval`` and ``trl-rlvr-ext curate`` (with their own
    defaults for the first three); `sampling_settings` turns them into one `SamplingSettings`."""
    parser.add_argument("--num_samples", type=int, default=num_samples, help="Samples per problem (n, or k).")
    parser.add_argument("--temperature", type=float, default=temperature, help="Sampling temperature.")
    parser.add_argument("--top_p", type=float, default=top_p, help="Nucleus sampling mass (1.0: off).")
    parser.add_argument("--max_new_tokens", type=int, default=1024, help="Generation budget per sample.")
    parser.add_argument("--seed", type=int, default=0, help="Sampling seed (batch or shard i samples with seed + i).")
    parser.add_argument("--correct_threshold", type=float, default=1.0, help="Reward that counts as correct.")
    parser.add_argument("--batch_size", type=int, default=64, help="Sequences per generate call.")
    parser.add_argument("--use_vllm", action="store_true", help="Generate with vLLM (must be installed).")
    parser.add_argument(
        "--vllm_kwargs",
        type=json.loads,
        default=None,
        help="JSON object of arguments for vllm.LLM, with --use_vllm (CPU: '{\"enforce_eager\": true}', see "
        "docs/vllm_cpu.md).",
    )


def sampling_settings(args: argparse.Namespace):
    """The `trl_rlvr_ext.sampling.SamplingSettings` of the options `add_sampling_arguments` added (raises ValueError
    or TypeError, naming the setting, when one is out of range)."""
    from ..sampling import SamplingSettings

    return SamplingSettings(
        num_samples=args.num_samples,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )


def load_problem_set(args: argparse.Namespace):
    """``(dataset, reward_funcs)`` of the options `add_problem_arguments` added plus ``--split`` and
    ``--reward_funcs`` (raises ValueError, FileNotFoundError or ImportError with what is wrong)."""
    from ..evaluation.data import load_problems, with_prompt_column
    from ..evaluation.generation import resolve_reward_funcs
    from ..rewards.columns import check_reward_columns

    dataset = load_problems(args.dataset, args.split, args.dataset_config)
    dataset = with_prompt_column(dataset, args.prompt_column, args.prompt_template, args.chat)
    reward_funcs = resolve_reward_funcs(args.reward_funcs)
    # Before any model loads: the columns the rewards read (a raw TypeError at the first grading otherwise)
    check_reward_columns(reward_funcs, dataset.column_names, f"dataset {args.dataset!r}")
    return dataset, reward_funcs


def fail(prog: str, message: str) -> int:
    """Print ``prog: error: message`` on stderr (no traceback) and return the usage-error exit status, 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2
