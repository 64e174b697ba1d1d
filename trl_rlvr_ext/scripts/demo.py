"""``trl-rlvr-ext demo``: the embedded default, end to end, offline, on CPU in a few minutes.

GRPO with stochastic clip recovery (NSR) on the toy base model and task; see `trl_rlvr_ext.scripts.demo_run.run_demo`
for the steps. Only the standard library is imported before the options are parsed (``--help`` answers at once).
"""

import argparse
import os
import sys

from .common import HelpFormatter
from .demo_common import check_demo_batch


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-rlvr-ext demo",
        description="GRPO with stochastic clip recovery (NSR) on a tiny offline model and a synthetic verifiable task "
        "(little-endian addition). Prints held-out accuracy before and after.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--model",
        default=None,
        help="A real pretrained model instead of the toy (smollm2-135m-instruct): GRPO + LoRA on a reasoning-gym task; "
        "its options: trl-rlvr-ext demo --model smollm2-135m-instruct --help.",
    )
    parser.add_argument("--output-dir", default="outputs/demo", help="Where the trained model and the logs go.")
    parser.add_argument("--seed", type=int, default=0, help="Training seed (the base model has its own).")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="A smoke run of the whole pipeline in well under a minute: a short warm start (at most 100 steps, cached "
        "separately; its base model is not the real one), 8 RL steps, a 50-problem evaluation. Its numbers mean nothing.",
    )
    parser.add_argument(
        "--num-threads",
        type=int,
        default=None,
        help="PyTorch CPU threads: PyTorch's choice if OMP_NUM_THREADS is set, else 1 (the model is tiny: "
        "more threads gain little, and on a busy machine they slow it down several-fold). None: that choice.",
    )
    rl = parser.add_argument_group("GRPO")
    rl.add_argument("--max-steps", type=int, default=300, help="Optimiser steps.")
    rl.add_argument("--learning-rate", type=float, default=1e-4, help="Constant learning rate of AdamW.")
    rl.add_argument("--num-prompts", type=int, default=32, help="Prompts per generation batch.")
    rl.add_argument("--num-generations", type=int, default=8, help="Completions per prompt (the GRPO group).")
    rl.add_argument(
        "--steps-per-generation",
        type=int,
        default=4,
        help="Optimiser steps per generation batch; above 1 the importance ratio moves away from 1, so the clip and "
        "NSR act.",
    )
    rl.add_argument(
        "--clip-recovery", default="nsr", choices=["none", "nsr", "nsr_expected"], help="none is stock TRL's clip."
    )
    data = parser.add_argument_group("task and evaluation")
    data.add_argument("--num-train", type=int, default=2000, help="Training problems.")
    data.add_argument("--num-test", type=int, default=500, help="Held-out problems.")
    data.add_argument("--eval-samples", type=int, default=16, help="Sampled completions per held-out problem.")
    data.add_argument("--eval-every", type=int, default=100, help="Held-out evaluation every N steps (0: off).")
    base = parser.add_argument_group("base model (warm start; cached by these settings)")
    base.add_argument(
        "--cache-dir", default=None, help="Cache root (None: $TRL_RLVR_EXT_CACHE, else ~/.cache/trl_rlvr_ext)."
    )
    base.add_argument("--min-digits", type=int, default=2, help="Difficulty dial: fewest digits per operand.")
    base.add_argument("--max-digits", type=int, default=3, help="Difficulty dial: most digits per operand.")
    base.add_argument(
        "--forget-carry-prob", type=float, default=0.6, help="Chance that a warm-start demonstration drops each carry."
    )
    base.add_argument("--warmstart-steps", type=int, default=1500, help="Supervised warm-start steps.")
    base.add_argument("--warmstart-seed", type=int, default=0, help="Seed of the warm start.")
    base.add_argument("--hidden-size", type=int, default=128, help="Width of the toy model.")
    base.add_argument("--num-hidden-layers", type=int, default=4, help="Depth of the toy model.")
    base.add_argument("--intermediate-size", type=int, default=256, help="MLP width of the toy model.")
    return parser


def cli_main(argv: list[str] | None = None) -> int:
    """Entry point of ``trl-rlvr-ext demo`` (and ``python -m trl_rlvr_ext.scripts.demo``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(arg == "--model" or arg.startswith("--model=") for arg in argv) or "--render" in argv:
        from .demo_pretrained import cli_main as pretrained_main

        return pretrained_main(argv)
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.max_steps, args.num_test, args.eval_samples, args.eval_every = min(args.max_steps, 8), 50, 4, 0
        args.warmstart_steps = min(args.warmstart_steps, 100)
    check_demo_batch(
        parser,
        args,
        ("max_steps", "num_prompts", "num_generations", "steps_per_generation", "num_test", "eval_samples"),
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from .demo_run import run_demo

    run_demo(args)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
