"""Per-step cost of POPO (`objective="popo"`) against stock TRL GRPO, whole steps alternated in one process.

    python bench/popo_overhead.py [--rounds 5] [--steps 10] [--hidden 64] [--layers 4]
    python bench/popo_overhead.py --quick     # make bench-quick's run (bench/quick.py): 3 rounds of 4 steps
    python bench/popo_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU

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


def main():
    parser = grpo_overhead.common_parser(
        __doc__, rounds=5, steps=10, repeats=0, quick_settings={"rounds": 3, "steps": 4}
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        options, model_path, shape = grpo_overhead.setup(parser, args, tmp)
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


if __name__ == "__main__":
    main()
