"""Dynamic sampling (DAPO) against stock GRPO on the toy task, side by side in one process.

Both arms start from the cached toy base model (`trl_rlvr_ext.toy.get_base_model_path`, built once, ~3 min on 2
cores) with the same seed, data and settings; only ``dynamic_sampling`` differs. Printed per arm and as ratios
(dynamic / stock):

- **time to a target held-out pass@1**: training wall time (held-out evaluations excluded) until an evaluation every
  ``--eval_every`` steps first reaches ``--target`` (default: the base model's pass@1 + ``--target_gain``), and the
  optimiser steps it took;
- **generated tokens per informative group**: for each generation batch, the completion tokens generated for it (all
  rounds, dropped groups included) over the groups in it that carry signal (non-zero advantages); the median over
  batches and the pooled ratio (all tokens / all informative groups);
- the regime: the zero-variance share of stock's groups (TRL's ``frac_reward_zero_std``), and dynamic sampling's
  rounds and kept share.

Defaults take a few minutes on 2 CPU cores (after the base model is cached). One seed per run; pass --seeds 0 1 2 for
the spread (EVIDENCE.md's rule: a difference smaller than the spread is no difference). ``--quick`` is `make
bench-quick`'s run (bench/quick.py): 10 steps, a smaller held-out set.
"""

import argparse
import os
import statistics
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


try:  # run as a script (bench/ on sys.path) or imported as bench.dynamic_sampling
    from quick import quick_defaults, report
except ImportError:
    from bench.quick import quick_defaults, report


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max_steps", type=int, default=40, help="Optimiser steps per arm (the budget).")
    parser.add_argument("--num_prompts", type=int, default=16, help="Groups per generation batch.")
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--max_rounds", type=int, default=10, help="dynamic_sampling_max_rounds.")
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--num_test", type=int, default=200, help="Held-out problems.")
    parser.add_argument("--eval_samples", type=int, default=8, help="Samples per held-out problem for pass@1.")
    parser.add_argument("--target", type=float, default=None, help="Held-out pass@1 to reach (absolute).")
    parser.add_argument("--target_gain", type=float, default=0.05, help="Default target: base pass@1 + this.")
    parser.add_argument(
        "--warmstart_steps", type=int, default=1500, help="Warm-start steps of the toy base (1500: the demo's base)."
    )
    quick_defaults(parser, None, max_steps=10, num_test=50, eval_samples=2)
    return parser.parse_args()


def run_arm(name, dynamic, base_path, data, args, seed, target, eval_kwargs):
    import torch
    from transformers import TrainerCallback

    from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
    from trl_rlvr_ext.rewards.toy import toy_accuracy_reward
    from trl_rlvr_ext.toy import evaluate_accuracy

    record = {"tokens": 0}

    def toy_accuracy(completions, answer, completion_ids, **kwargs):
        record["tokens"] += sum(len(ids) for ids in completion_ids)
        return toy_accuracy_reward(completions, answer)

    config = RLVRGRPOConfig(
        output_dir=tempfile.mkdtemp(prefix=f"bench_ds_{name}_"),
        per_device_train_batch_size=args.num_prompts * args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=eval_kwargs["max_new_tokens"],
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        max_steps=args.max_steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        seed=seed,
        dynamic_sampling=dynamic,
        dynamic_sampling_max_rounds=args.max_rounds,
    )
    trainer = RLVRGRPOTrainer(
        model=base_path, reward_funcs=toy_accuracy, args=config, train_dataset=data["train"].shuffle(seed=seed)
    )
    batches = []  # (generated tokens, informative groups) per generation batch
    original = trainer._generate_and_score_completions

    def spy(inputs):
        record["tokens"] = 0
        out = original(inputs)
        informative = int((out["advantages"].view(-1, args.num_generations) != 0).any(dim=1).sum())
        batches.append((record["tokens"], informative))
        return out

    trainer._generate_and_score_completions = spy
    state = {"eval_seconds": 0.0, "reached": None, "curve": []}

    class HeldOut(TrainerCallback):
        def on_train_begin(self, a, s, c, **kw):
            state["start"] = time.perf_counter()

        def on_step_end(self, a, s, control, **kw):
            if s.global_step % args.eval_every:
                return
            t0 = time.perf_counter()
            pass1 = evaluate_accuracy(trainer.model, trainer.processing_class, data["test"], **eval_kwargs)["pass@1"]
            state["eval_seconds"] += time.perf_counter() - t0
            elapsed = time.perf_counter() - state["start"] - state["eval_seconds"]
            state["curve"].append((s.global_step, round(pass1, 4)))
            if state["reached"] is None and pass1 >= target:
                state["reached"] = (s.global_step, elapsed)
                control.should_training_stop = True  # the first figure is measured; the second has its batches

    trainer.add_callback(HeldOut())
    torch.manual_seed(seed)
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    per_batch = [t / i for t, i in batches if i > 0]
    return {
        "reached": state["reached"],
        "curve": state["curve"],
        "tokens_per_informative_median": statistics.median(per_batch) if per_batch else float("inf"),
        "tokens_per_informative_pooled": (
            sum(t for t, _ in batches) / sum(i for _, i in batches) if any(i for _, i in batches) else float("inf")
        ),
        "batches_without_signal": sum(1 for _, i in batches if i == 0),
        "zero_std_share": statistics.fmean(log["frac_reward_zero_std"] for log in logs),
        "rounds": statistics.fmean(log.get("dynamic_sampling/rounds", 1.0) for log in logs),
        "kept_frac": statistics.fmean(log.get("dynamic_sampling/kept_frac", float("nan")) for log in logs),
        "bound_hit": sum(log.get("dynamic_sampling/bound_hit", 0.0) for log in logs),
        "steps": trainer.state.global_step,
    }


def main():
    args = parse_args()
    import torch

    from trl_rlvr_ext.toy import evaluate_accuracy, get_base_model_path, make_task_datasets

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    t_start = time.perf_counter()
    base_path = get_base_model_path(progress=False, num_steps=args.warmstart_steps)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = make_task_datasets(num_train=2000, num_test=args.num_test, seed=0)
    eval_kwargs = {"num_samples": args.eval_samples, "batch_size": 100, "max_new_tokens": 7}
    base = evaluate_accuracy(
        AutoModelForCausalLM.from_pretrained(base_path),
        AutoTokenizer.from_pretrained(base_path),
        data["test"],
        **eval_kwargs,
    )
    target = args.target if args.target is not None else round(base["pass@1"] + args.target_gain, 4)
    print(
        f"base held-out pass@1 {base['pass@1']:.4f} ({args.num_test} problems x {args.eval_samples}); target {target}"
    )
    rows = []
    for seed in args.seeds:
        stock = run_arm("stock", False, base_path, data, args, seed, target, eval_kwargs)
        dynamic = run_arm("dynamic", True, base_path, data, args, seed, target, eval_kwargs)
        rows.append((seed, stock, dynamic))
        for name, r in (("stock GRPO", stock), ("dynamic sampling", dynamic)):
            reached = f"step {r['reached'][0]}, {r['reached'][1]:.1f} s" if r["reached"] else "not reached"
            print(
                f"seed {seed} {name:17s} target: {reached:22s} | tokens/informative group: median "
                f"{r['tokens_per_informative_median']:.1f}, pooled {r['tokens_per_informative_pooled']:.1f} | "
                f"zero-std share {r['zero_std_share']:.3f}, rounds {r['rounds']:.2f}, kept_frac {r['kept_frac']:.3f}, "
                f"bound hit {r['bound_hit']:.0f}, steps {r['steps']} | held-out pass@1 {r['curve']}"
            )
    print("\nratios dynamic / stock (per seed):")
    for seed, stock, dynamic in rows:
        time_ratio = (
            f"{dynamic['reached'][1] / stock['reached'][1]:.2f}"
            if stock["reached"] and dynamic["reached"]
            else "n/a (an arm did not reach the target)"
        )
        steps_ratio = (
            f"{dynamic['reached'][0] / stock['reached'][0]:.2f}" if stock["reached"] and dynamic["reached"] else "n/a"
        )
        print(
            f"  seed {seed}: time to target {time_ratio}, steps to target {steps_ratio}, tokens per informative group "
            f"median {dynamic['tokens_per_informative_median'] / stock['tokens_per_informative_median']:.2f}, pooled "
            f"{dynamic['tokens_per_informative_pooled'] / stock['tokens_per_informative_pooled']:.2f}"
        )
    print(f"total wall time {time.perf_counter() - t_start:.0f} s")
    if args.quick:  # bench/targets.py: tokens per informative group, dynamic / stock (the first seed's)
        _, stock, dynamic = rows[0]
        report("dynamic_sampling", dynamic["tokens_per_informative_median"] / stock["tokens_per_informative_median"])


if __name__ == "__main__":
    main()
