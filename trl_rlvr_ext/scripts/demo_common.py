"""What the two demos (the toy's and the real model's) share: the batch checks of their options and their GRPO
configuration (DAPO loss, no KL, constant learning rate, each generation batch split over ``--steps-per-generation``
optimiser steps, CPU, no checkpoints)."""

import argparse


def check_demo_batch(parser: argparse.ArgumentParser, args: argparse.Namespace, positive: tuple[str, ...]) -> None:
    """``parser.error`` with the fix when an option of ``positive`` is below 1, the group has fewer than 2
    completions, or the generation batch does not split evenly over the optimiser steps."""
    for name in positive:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}.")
    if args.num_generations < 2:
        parser.error("--num-generations must be at least 2: GRPO's advantage compares completions of one prompt.")
    if (args.num_prompts * args.num_generations) % args.steps_per_generation:
        parser.error(
            f"--num-prompts x --num-generations ({args.num_prompts * args.num_generations}) must be divisible by "
            f"--steps-per-generation ({args.steps_per_generation}): each optimiser step takes an equal share."
        )


def demo_grpo_config(args: argparse.Namespace, output_dir: str, **options):
    """The demos' `RLVRGRPOConfig` from their options (``max_steps``, ``learning_rate``, ``num_prompts``,
    ``num_generations``, ``steps_per_generation``, ``seed``); ``options`` add or override fields (the completion
    length, temperature, logging, the method's options)."""
    from .._compat import activation_checkpointing_kwargs
    from ..grpo.grpo_config import RLVRGRPOConfig

    fields = {
        "output_dir": output_dir,
        "loss_type": "dapo",
        "beta": 0.0,
        "learning_rate": args.learning_rate,
        "lr_scheduler_type": "constant",
        "num_generations": args.num_generations,
        "per_device_train_batch_size": args.num_prompts * args.num_generations // args.steps_per_generation,
        "steps_per_generation": args.steps_per_generation,
        "gradient_accumulation_steps": 1,
        "max_steps": args.max_steps,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        # TRL turns it on by default; short sequences on CPU: memory is not the limit
        **activation_checkpointing_kwargs(False),
        "seed": args.seed,
    }
    return RLVRGRPOConfig(**{**fields, **options})
