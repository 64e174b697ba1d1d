"""Per-step cost of POPO (`objective="popo"`) against stock TRL GRPO, whole steps alternated in one process.

    python bench/popo_overhead.py [--rounds 5] [--steps 10] [--hidden 64] [--layers 4]
    python bench/popo_overhead.py --quick     # make bench-quick's run (bench/quick.py): 3 rounds of 4 steps
    python bench/popo_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU
    python bench/popo_overhead.py --model smollm2-135m-instruct --threads 1 --batch 8 --dtype float32 --rounds 0 \
        --repeats 7               # where the time goes, on the real model (the loss paths, the EMA forward, update)

POPO replaces TRL's loss, so bench/grpo_overhead.py's loss-path timing (one trainer whose options are switched per
call) does not apply: a POPO trainer holds an EMA copy and a predictor built at construction. Here stock
`trl.GRPOTrainer` and `RLVRGRPOTrainer(objective="popo")` (the authors' defaults: α 0.1, β_ent 0.01, τ 0.995, a
1024-wide two-layer predictor) train ``--steps`` steps each on bench/grpo_overhead.py's settings (``num_iterations=2``,
so TRL computes θ_old's log-probs and POPO's weights need no extra forward), alternated arm by arm for ``--rounds``
rounds; per round the median step time after the first step; the result is the median of the per-round ratios.
POPO's extra work per micro-batch: a forward of the EMA copy without gradient (logits at one position), the entropy
over the vocabulary with gradient, the pooled hidden states and the predictor; per step: the EMA update. It saves
TRL's entropy pass without gradient and its ratio / clip / metric reductions. The memory cost (not timed): the EMA copy
of the trainable parameters (a second model under full fine-tuning; the adapter under LoRA).
"""

import os
import statistics
import tempfile
import time

import torch


try:  # run as a script (bench/ on sys.path) or imported as bench.popo_overhead
    import grpo_overhead
except ImportError:
    from bench import grpo_overhead


ARMS = ("stock", "popo")


def step_ratios(model_path: str, out_dir: str, rounds: int, steps: int, **options) -> dict:
    """Whole-step times of stock and POPO, alternated arm by arm: per-round medians (first step dropped) and the
    median of the per-round ratios."""
    ratios, medians = [], {arm: [] for arm in ARMS}
    for r in range(rounds):
        round_medians = {}
        for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
            timer = grpo_overhead.StepTimer()
            trainer = grpo_overhead.make_trainer(
                arm, model_path, steps, os.path.join(out_dir, f"{arm}{r}"), callbacks=[timer], **options
            )
            trainer.train()
            round_medians[arm] = statistics.median(timer.times[1:])
            medians[arm].append(round_medians[arm])
        ratios.append(round_medians["popo"] / round_medians["stock"])
        print(f"round {r + 1}/{rounds}: popo x{ratios[-1]:.3f}")
    return {
        "ratio": statistics.median(ratios),
        "stock_seconds": statistics.median(medians["stock"]),
        "trainer": trainer,
    }


def cost_breakdown(model_path: str, out_dir: str, repeats: int, **options) -> dict:
    """Where POPO's extra time goes, on one generated batch, ``repeats`` interleaved times (median seconds): TRL's loss
    path (forward + backward of `_compute_loss`) against POPO's (`Popo.compute_loss` + backward), the EMA copy's
    forward within POPO's (timed by wrapping it), the EMA update of one optimizer step, and a stock whole step (the
    median of 2 steps after a warm-up) to put them over."""
    from trl import GRPOTrainer

    timer = grpo_overhead.StepTimer()
    stock = grpo_overhead.make_trainer(
        "stock", model_path, 3, os.path.join(out_dir, "stock"), callbacks=[timer], **options
    )
    stock.train()
    stock_step = statistics.median(timer.times[1:])
    del stock
    trainer = grpo_overhead.make_trainer("popo", model_path, 2, os.path.join(out_dir, "popo"), **options)
    trainer.train()  # two updates: the EMA copy and the policy apart
    method, model = trainer.method("popo"), trainer.model
    model.train()
    inputs = trainer._generate_and_score_completions(
        [trainer.train_dataset[i] for i in range(trainer.args.generation_batch_size)]
    )
    in_ema = [0.0]
    ema_forward = method.ema.forward

    def timed_ema_forward(*args, **kwargs):
        grpo_overhead.synchronize()
        start = time.perf_counter()
        out = ema_forward(*args, **kwargs)
        grpo_overhead.synchronize()
        in_ema[0] += time.perf_counter() - start
        return out

    runs = {
        "stock": lambda: GRPOTrainer._compute_loss(trainer, model, inputs).backward(),
        "popo": lambda: method.compute_loss(model, inputs).backward(),
        "ema_update": method.ema_step,
    }
    times = {name: [] for name in (*runs, "ema_forward")}
    method.ema.forward = timed_ema_forward
    try:
        for r in range(repeats + 1):
            for name in list(runs)[r % 3 :] + list(runs)[: r % 3]:
                model.zero_grad(set_to_none=True)
                in_ema[0] = 0.0
                grpo_overhead.synchronize()
                start = time.perf_counter()
                runs[name]()
                grpo_overhead.synchronize()
                if r == 0:  # warm-up
                    continue
                times[name].append(time.perf_counter() - start)
                if name == "popo":
                    times["ema_forward"].append(in_ema[0])
    finally:
        del method.ema.forward
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians["loss_path_ratio"] = statistics.median(p / s for p, s in zip(times["popo"], times["stock"]))
    medians["stock_step"] = stock_step
    medians["micro_batches_per_step"] = trainer.args.gradient_accumulation_steps
    return medians


def main():
    parser = grpo_overhead.common_parser(
        __doc__, rounds=5, steps=10, repeats=0, quick_settings={"rounds": 3, "steps": 4}
    )
    parser.add_argument("--model", default=None, help="a pretrained name or a local model path (instead of --shape)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        options, model_path, shape = grpo_overhead.setup(parser, args, tmp)
        if args.model is not None:
            from trl_rlvr_ext.data import resolve_model_name_or_path

            model_path, shape = resolve_model_name_or_path(args.model), args.model
        if args.repeats > 0:
            parts = cost_breakdown(model_path, os.path.join(tmp, "parts"), args.repeats, **options)
            print_breakdown(parts, args.repeats)
        if args.rounds == 0:
            return None
        result = step_ratios(model_path, tmp, args.rounds, args.steps, **options)
    where = f"CPU, {torch.get_num_threads()} threads" if args.device == "cpu" else torch.cuda.get_device_name()
    print(
        f"\nPOPO vs stock TRL GRPO, {where}, {shape}, dtype {args.dtype}, "
        f"{args.batch} completions x {args.completion_length} tokens per step"
    )
    print(
        f"whole-step ratio (median of {args.rounds} rounds x {args.steps} steps): {result['ratio']:.3f} "
        f"(stock {result['stock_seconds'] * 1e3:.0f} ms per step)"
    )
    if args.quick:
        grpo_overhead.quick.report("popo", result["ratio"])
    return result


def print_breakdown(parts: dict, repeats: int) -> None:
    step, k = parts["stock_step"], parts["micro_batches_per_step"]
    extra = (parts["popo"] - parts["stock"]) * k + parts["ema_update"]
    print(f"\nPOPO's cost on one batch (median of {repeats} interleaved repeats; stock whole step {step:.3f} s):")
    rows = [
        ("stock loss path (TRL's `_compute_loss` + backward)", parts["stock"]),
        ("POPO loss path (`Popo.compute_loss` + backward)", parts["popo"]),
        ("  of which the EMA copy's forward", parts["ema_forward"]),
        (
            "  the rest over stock (full-vocabulary logits, entropy",
            parts["popo"] - parts["stock"] - parts["ema_forward"],
        ),
        ("   with gradient, the predictor)", None),
        ("EMA update (once per optimizer step)", parts["ema_update"]),
    ]
    for label, seconds in rows:
        print(f"  {label:<56}" + ("" if seconds is None else f"{seconds * 1e3:10.1f} ms"))
    print(
        f"loss-path ratio {parts['loss_path_ratio']:.3f}; implied step ratio 1 + ({k} x loss-path extra + EMA update) "
        f"/ stock step = {1 + extra / step:.3f}; of it the EMA forward {k * parts['ema_forward'] / step:.3f}"
    )


if __name__ == "__main__":
    main()
