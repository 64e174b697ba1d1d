"""``trl-rlvr-ext demo``: the embedded default, end to end, offline, on CPU in a few minutes.

1. Build (first run) or load (later runs) the cached toy base model (`trl_rlvr_ext.toy.warmstart`).
2. Measure held-out accuracy: greedy and sampled pass@1 (`trl_rlvr_ext.toy.evaluate`).
3. Train it with `RLVRGRPOTrainer` (GRPO, DAPO loss) with stochastic clip recovery (NSR) and the strict verifiable
   reward `toy_accuracy_reward`, reusing each generation batch for several optimiser steps so the importance ratio
   moves and the clip (hence NSR) is active.
4. Measure held-out accuracy again and print a summary; the model, the logs (JSONL) and a summary JSON are written to
   the output directory.

The command line (``trl-rlvr-ext demo``) is `trl_rlvr_ext.scripts.demo`; `run_demo` takes its parsed options.
"""

import json
import os
import statistics
import time
from pathlib import Path


class _JsonlLogger:
    """Appends one JSON object per line; the trainer's logs and the held-out evaluations go to the same file."""

    def __init__(self, path: Path):
        self.path = path
        path.write_text("")

    def write(self, record: dict):
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def _short(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "per_problem_pass_rate"}


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else float("nan")


def run_demo(args) -> dict:
    """Run the demo with the options of ``trl-rlvr-ext demo`` (an `argparse.Namespace` from
    `trl_rlvr_ext.scripts.demo.make_parser`); returns the summary dict (also written to ``summary.json``)."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from ..grpo.grpo_trainer import RLVRGRPOTrainer
    from ..rewards.toy import toy_accuracy_reward
    from ..toy.evaluate import evaluate_accuracy
    from ..toy.task import make_task_datasets
    from ..toy.warmstart import get_base_model_path, is_base_model_cached
    from .demo_common import demo_grpo_config

    if args.num_threads is not None:
        torch.set_num_threads(args.num_threads)
    elif "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    start = time.perf_counter()
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    logger = _JsonlLogger(output_dir / "logs.jsonl")
    eval_kwargs = {"num_samples": args.eval_samples, "batch_size": 100, "max_new_tokens": args.max_digits + 4}

    print(
        f"[1/4] Base model (warm start, cached): digits {args.min_digits}-{args.max_digits}, forget_carry_prob "
        f"{args.forget_carry_prob}",
        flush=True,
    )
    t0 = time.perf_counter()
    base_settings = {
        "min_digits": args.min_digits,
        "max_digits": args.max_digits,
        "forget_carry_prob": args.forget_carry_prob,
        "num_steps": args.warmstart_steps,
        "seed": args.warmstart_seed,
        "hidden_size": args.hidden_size,
        "num_hidden_layers": args.num_hidden_layers,
        "intermediate_size": args.intermediate_size,
    }
    cached = is_base_model_cached(args.cache_dir, **base_settings)
    if not cached:
        print("      not cached yet: training it now (once; later runs load it)", flush=True)
    base_path = get_base_model_path(cache_dir=args.cache_dir, **base_settings)
    warmstart_seconds = time.perf_counter() - t0
    print(
        f"      {base_path} ({'loaded from cache' if cached else f'built in {warmstart_seconds:.0f} s'})", flush=True
    )
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    model = AutoModelForCausalLM.from_pretrained(base_path)
    data = make_task_datasets(
        num_train=args.num_train, num_test=args.num_test, min_digits=args.min_digits, max_digits=args.max_digits
    )

    print(f"[2/4] Held-out accuracy before RL ({args.num_test} problems x {args.eval_samples} samples)", flush=True)
    before = evaluate_accuracy(model, tokenizer, data["test"], **eval_kwargs)
    logger.write({"step": 0, "heldout": _short(before)})

    class HeldOutEval(TrainerCallback):
        def on_step_end(self, _args, state, control, model=None, **kwargs):
            if args.eval_every and state.global_step % args.eval_every == 0 and state.global_step < state.max_steps:
                result = evaluate_accuracy(model, tokenizer, data["test"], **eval_kwargs)
                logger.write({"step": state.global_step, "heldout": _short(result)})
                tqdm.write(  # above the trainer's progress bar, not through it
                    f"      step {state.global_step}: held-out greedy {result['greedy_accuracy']:.3f}, "
                    f"pass@1 {result['pass@1']:.3f}"
                )

        def on_log(self, _args, state, control, logs=None, **kwargs):
            logger.write({"step": state.global_step, **(logs or {})})

    config = demo_grpo_config(
        args,
        str(output_dir),
        clip_recovery=args.clip_recovery,
        epsilon=0.2,
        epsilon_high=0.28,
        max_completion_length=args.max_digits + 4,  # "[" + (max_digits + 1) digits + "]" + EOS
        temperature=1.0,
        logging_steps=max(1, min(25, args.max_steps // 4)),
    )
    trainer = RLVRGRPOTrainer(
        model=model,
        reward_funcs=toy_accuracy_reward,
        args=config,
        train_dataset=data["train"],
        processing_class=tokenizer,
        callbacks=[HeldOutEval()],
    )
    print(f"[3/4] GRPO + clip_recovery={args.clip_recovery!r}: {args.max_steps} steps", flush=True)
    t0 = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - t0
    trainer.save_model(str(output_dir))
    trainer.save_state()

    print("[4/4] Held-out accuracy after RL", flush=True)
    after = evaluate_accuracy(trainer.model, tokenizer, data["test"], **eval_kwargs)
    logger.write({"step": trainer.state.global_step, "heldout": _short(after)})

    train_logs = [log for log in trainer.state.log_history if "reward" in log]
    summary = {
        "before": _short(before),
        "after": _short(after),
        "train_reward_first": train_logs[0]["reward"] if train_logs else None,
        "train_reward_last": train_logs[-1]["reward"] if train_logs else None,
        "clip_recovery": args.clip_recovery,
        "clip_recovery/high_frac_mean": _mean(log.get("clip_recovery/high_frac") for log in train_logs),
        "clip_recovery/low_frac_mean": _mean(log.get("clip_recovery/low_frac") for log in train_logs),
        "clip_ratio/region_mean_mean": _mean(log.get("clip_ratio/region_mean") for log in train_logs),
        "base_model": base_path,
        "output_dir": str(output_dir),
        "warmstart_seconds": round(warmstart_seconds, 1),
        "train_seconds": round(train_seconds, 1),
        "torch_threads": torch.get_num_threads(),
        "total_seconds": round(time.perf_counter() - start, 1),
        "args": vars(args),
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    _print_summary(summary)
    return summary


def _print_summary(s: dict):
    b, a = s["before"], s["after"]
    k = b["num_samples"]
    lines = [""]
    if s["args"]["quick"]:
        lines.append(
            "--quick: a smoke run of the pipeline on a barely trained base model; these numbers mean nothing."
        )
    lines += [
        f"Held-out accuracy ({b['num_problems']} problems never trained on; {k} samples each at temperature 1):",
        f"  greedy accuracy   {b['greedy_accuracy']:.3f} -> {a['greedy_accuracy']:.3f}",
        f"  sampled pass@1    {b['pass@1']:.3f} -> {a['pass@1']:.3f}",
        f"  pass@{k:<13d}{b[f'pass@{k}']:.3f} -> {a[f'pass@{k}']:.3f}",
    ]
    if "pass@1_by_num_carries" in b:
        by = ", ".join(
            f"{c}: {b['pass@1_by_num_carries'][c]:.2f}->{a['pass@1_by_num_carries'][c]:.2f}"
            for c in b["pass@1_by_num_carries"]
        )
        lines.append(f"  pass@1 by number of carries  {by}")
    if s["train_reward_first"] is not None:
        lines.append(
            f"Train reward (first -> last log): {s['train_reward_first']:.3f} -> {s['train_reward_last']:.3f}"
        )
    if s["clip_recovery"] != "none":
        lines.append(
            f"Clip recovery ({s['clip_recovery']}): rescued token share, mean over logs: "
            f"high {s['clip_recovery/high_frac_mean']:.5f}, low {s['clip_recovery/low_frac_mean']:.5f} "
            f"(clipped share {s['clip_ratio/region_mean_mean']:.5f})"
        )
    out = s["output_dir"]
    logs = (
        f"{os.path.join(out, 'logs.jsonl')} (trainer logs, held-out evaluations), {os.path.join(out, 'summary.json')}"
    )
    times = f"warm start {s['warmstart_seconds']:.0f} s, RL {s['train_seconds']:.0f} s"
    lines += [
        f"Model + tokenizer: {out}",
        f"Logs: {logs}",
        f"Wall time: {s['total_seconds']:.0f} s ({times})",
    ]
    print("\n".join(lines), flush=True)
