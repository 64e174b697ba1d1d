"""Per-step cost of online curation against stock GRPO, side by side in one process.

Runs stock `GRPOTrainer` and `RLVRGRPOTrainer` with `curation="self"` (greedy decode fused into the sampling call, and
separate), and `curation="pass_rate"`, in alternation (rounds x variants) on the toy task and a tiny model, and prints
median ratios:

- step time (TRL's ``step_time`` metric: generation + scoring + forward/backward of one optimizer step);
- SELF's greedy decode against stock generation: the extra generation time per step over stock's. The greedy decode
  adds one completion per prompt where sampling decodes ``num_generations``. Fused into the sampling ``generate``
  call (the default) it costs about ``1 / num_generations`` of generation or less; as a separate call
  (``curation_self_fused_greedy=False``, and always with vLLM) it pays a full decode's latency on small batches.

The tiny random model never answers the toy task, so SELF keeps every prompt here: the numbers are pure overhead.
Defaults take about a minute on 2 CPU cores; raise --steps / --rounds / --hidden_size for steadier numbers. ``--quick``
is `make bench-quick`'s run (bench/quick.py).
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


try:  # run as a script (bench/ on sys.path) or imported as bench.curation_overhead
    from quick import quick_defaults, report
except ImportError:
    from bench.quick import quick_defaults, report


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="Alternating rounds (each runs all three trainers).")
    parser.add_argument("--steps", type=int, default=6, help="Optimizer steps per run (the first is not timed).")
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--prompts_per_step", type=int, default=8)
    parser.add_argument("--max_completion_length", type=int, default=8)
    parser.add_argument("--hidden_size", type=int, default=64)
    parser.add_argument("--num_hidden_layers", type=int, default=2)
    quick_defaults(parser, None, rounds=3, steps=4)
    return parser.parse_args()


def instrument(trainer, timers: dict) -> None:
    """Accumulate the time a trainer spends in generation (sampling, and SELF's greedy decode whether fused into the
    sampling call or separate)."""
    generate = trainer._generate_single_turn

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            timers["generation"] += time.perf_counter() - start

    trainer._generate_single_turn = timed


def main():
    args = parse_args()
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
    from trl_rlvr_ext.rewards.toy import toy_accuracy_reward
    from trl_rlvr_ext.toy import save_tiny_model
    from trl_rlvr_ext.toy.task import make_task_datasets

    workdir = tempfile.mkdtemp(prefix="curation_bench_")
    model_path = save_tiny_model(
        os.path.join(workdir, "model"),
        hidden_size=args.hidden_size,
        num_hidden_layers=args.num_hidden_layers,
        intermediate_size=4 * args.hidden_size,
    )
    data = make_task_datasets(num_train=256, num_test=8)["train"]
    common = {
        "per_device_train_batch_size": args.prompts_per_step * args.num_generations,
        "num_generations": args.num_generations,
        "max_completion_length": args.max_completion_length,
        "max_steps": args.steps,
        "learning_rate": 1e-5,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "seed": 0,
    }
    self_kwargs = {"curation": "self", "curation_id_column": "idx"}
    variants = {
        "stock": (GRPOTrainer, GRPOConfig, {}),
        "self": (RLVRGRPOTrainer, RLVRGRPOConfig, self_kwargs),
        "self_separate": (RLVRGRPOTrainer, RLVRGRPOConfig, {**self_kwargs, "curation_self_fused_greedy": False}),
        "pass_rate": (RLVRGRPOTrainer, RLVRGRPOConfig, {"curation": "pass_rate", "curation_id_column": "idx"}),
    }
    step_times = {name: [] for name in variants}
    generation_times = {name: [] for name in variants}
    for round_ in range(args.rounds):
        for name, (trainer_cls, config_cls, extra) in variants.items():
            config = config_cls(output_dir=os.path.join(workdir, f"{name}_{round_}"), **common, **extra)
            trainer = trainer_cls(model=model_path, reward_funcs=toy_accuracy_reward, args=config, train_dataset=data)
            trainer.remove_callback(PrinterCallback)  # the step times are read from the state, not printed
            timers = {"generation": 0.0}
            instrument(trainer, timers)
            trainer.train()
            times = [log["step_time"] for log in trainer.state.log_history if "step_time" in log][1:]
            step_times[name].append(statistics.median(times))
            generation_times[name].append(timers["generation"] / args.steps)
            print(
                f"round {round_} {name:>13}: median step {1000 * step_times[name][-1]:.1f} ms, "
                f"generation {1000 * generation_times[name][-1]:.1f} ms/step"
            )

    def ratio(values, name):
        return statistics.median(a / b for a, b in zip(values[name], values["stock"]))

    print()
    print(
        f"settings: {args.prompts_per_step} prompts x {args.num_generations} samples, {args.steps} steps, "
        f"{args.rounds} rounds, hidden {args.hidden_size}, max_completion_length {args.max_completion_length}"
    )
    for name in ("self", "self_separate", "pass_rate"):
        print(f"step time ratio        {name:>13} / stock : {ratio(step_times, name):.3f}")
        if args.quick and name != "self_separate":  # bench/targets.py: the options' defaults
            report(f"curation_{name}", ratio(step_times, name))
    shutil.rmtree(workdir, ignore_errors=True)
    for name in ("self", "self_separate"):
        extra = ratio(generation_times, name) - 1.0
        print(
            f"greedy cost / generation ({name:>13}): {extra:+.3f}  (1 / num_generations = "
            f"{1 / args.num_generations:.3f})"
        )


if __name__ == "__main__":
    main()
