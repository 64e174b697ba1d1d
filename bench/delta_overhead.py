"""Per-step cost of DelTA's token credit (`token_credit="delta"`) against stock TRL GRPO, side by side in one process.

    python bench/delta_overhead.py [--rounds 5] [--steps 10] [--repeats 20] [--hidden 64] [--layers 4]
    python bench/delta_overhead.py --quick     # make bench-quick's run (bench/quick.py): 1 round of 4 steps, 3 repeats
    python bench/delta_overhead.py --shape qwen2-0.5b --rounds 2 --steps 4 --repeats 3 --batch 8 \
        --completion-length 4 --threads 2                     # Qwen2.5-0.5B's shape (random weights, built here), CPU
    python bench/delta_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU

DelTA's work is not in the loss: once per generation batch it runs one extra forward pass without gradient, with a
hook on the backbone capturing the hidden states, and computes the weights from them. Two measurements, on the
settings of bench/grpo_overhead.py (``num_iterations=2``: one generation every two optimizer steps):

1. *Whole steps*, stock `trl.GRPOTrainer` against `RLVRGRPOTrainer(token_credit="delta")`, alternated arm by arm for
   ``--rounds`` rounds of ``--steps`` steps. Per round, the mean step time after the first rollout (steps 3 onwards:
   whole generate-and-reuse cycles, so that the generation steps, where DelTA costs, are counted in proportion); the
   result is the median of the per-round ratios.
2. *Where DelTA's cost goes*, on one generated batch, ``--repeats`` interleaved times: the whole of
   `Delta.token_weights` (the hooked forward pass, the weights, their metrics); within it the weights
   (`delta_token_weights`) and the metrics (`delta_weight_stats` and the gather), timed by wrapping them; the
   hidden-state capture is the rest (the forward pass with the hook, the copies of the completion positions, their
   concatenation). The same forward pass without the hook is timed beside it: what the capture adds to a plain pass.

The implied step ratio is 1 + (DelTA's seconds per generation batch) / (steps per generation batch × stock step
seconds, from 1): the least load-sensitive figure on a shared CPU.
"""

import gc
import os
import statistics
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from trl import GRPOTrainer


try:  # run as a script (bench/ on sys.path) or imported as bench.delta_overhead
    import grpo_overhead
except ImportError:
    from bench import grpo_overhead

import trl_rlvr_ext.grpo.methods.delta as delta_module


ARMS = ("stock", "delta")
SKIP_STEPS = 2  # the first generate-and-reuse cycle (num_iterations=2): warm-up


class Stopwatch:
    """Wraps a module-level function of `trl_rlvr_ext.grpo.methods.delta`, summing the seconds spent in it."""

    def __init__(self, name: str):
        self.name, self.original, self.seconds = name, getattr(delta_module, name), 0.0

        def timed(*args, **kwargs):
            grpo_overhead.synchronize()
            start = time.perf_counter()
            out = self.original(*args, **kwargs)
            grpo_overhead.synchronize()
            self.seconds += time.perf_counter() - start
            return out

        setattr(delta_module, name, timed)

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds

    def close(self) -> None:
        setattr(delta_module, self.name, self.original)


def cost_breakdown(model_path: str, out_dir: str, repeats: int, **trainer_options) -> dict[str, float]:
    """Median seconds, per generation batch, of DelTA's parts (see the module docstring, 2)."""
    trainer = grpo_overhead.make_trainer("delta", model_path, 2, out_dir, **trainer_options)
    trainer.train()
    batch = [trainer.train_dataset[i] for i in range(trainer.args.generation_batch_size)]
    output = GRPOTrainer._generate_and_score_completions(trainer, batch)  # TRL's, without the weights
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    chunk = trainer.args.per_device_train_batch_size

    def plain_pass():  # the same no-grad pass as DelTA's, without the hook
        trainer.model.eval()
        with torch.no_grad():
            trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, attention, output["completion_ids"].size(1), batch_size=chunk
            )
        trainer.model.train()

    weights, stats = Stopwatch("delta_token_weights"), Stopwatch("delta_weight_stats")
    times = {"total": [], "weights": [], "stats": [], "plain_pass": []}
    try:
        for r in range(repeats + 2):
            order = ("delta", "plain") if r % 2 == 0 else ("plain", "delta")
            for what in order:
                grpo_overhead.synchronize()
                start = time.perf_counter()
                if what == "delta":
                    trainer.method("delta").token_weights(output)
                else:
                    plain_pass()
                grpo_overhead.synchronize()
                elapsed = time.perf_counter() - start
                if what == "delta":
                    w, s = weights.take(), stats.take()
                if r < 2:  # warm-up repeats dropped
                    continue
                if what == "delta":
                    times["total"].append(elapsed)
                    times["weights"].append(w)
                    times["stats"].append(s)
                else:
                    times["plain_pass"].append(elapsed)
    finally:
        weights.close()
        stats.close()
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians["capture"] = statistics.median(
        t - w - s for t, w, s in zip(times["total"], times["weights"], times["stats"])
    )
    medians["steps_per_generation_batch"] = trainer.args.steps_per_generation * trainer.args.num_iterations
    medians["steps_per_generation_batch"] /= trainer.args.gradient_accumulation_steps
    medians["tokens"] = tuple(output["completion_ids"].shape)
    return medians


def main():
    parser = grpo_overhead.common_parser(
        __doc__, rounds=5, steps=10, repeats=20, quick_settings={"rounds": 1, "steps": 4, "repeats": 3}
    )
    args = parser.parse_args()
    if args.steps <= SKIP_STEPS:
        parser.error(f"--steps must be above {SKIP_STEPS} (the first rollout's steps are dropped).")
    with tempfile.TemporaryDirectory() as tmp:
        options, model_path, shape = grpo_overhead.setup(parser, args, tmp)
        parts = cost_breakdown(model_path, os.path.join(tmp, "parts"), args.repeats, **options)
        gc.collect()
        step_ratios, stock_steps = grpo_overhead.alternated_rounds(
            ARMS, model_path, args.steps, args.rounds, tmp, skip=SKIP_STEPS, aggregate=statistics.mean, **options
        )
        ratios = step_ratios["delta"]

    where = f"CPU, {torch.get_num_threads()} threads" if args.device == "cpu" else torch.cuda.get_device_name()
    stock_step = statistics.median(stock_steps) if stock_steps else None
    print(
        f"\nDelTA vs stock TRL GRPO, {where}, {shape}, dtype {args.dtype}, {args.batch} completions x "
        f"{args.completion_length} tokens per step, one generation batch per {parts['steps_per_generation_batch']:g} "
        "steps"
    )
    if stock_step is not None:
        print(
            f"whole-step ratio: {statistics.median(ratios):.3f} (median of {args.rounds} alternated rounds, per-round "
            f"ratios {', '.join(f'{x:.3f}' for x in ratios)}; stock {stock_step * 1e3:.1f} ms/step)"
        )
    cycle = parts["steps_per_generation_batch"] * stock_step if stock_step else None
    print(f"\nDelTA per generation batch ({parts['tokens'][0]} completions x {parts['tokens'][1]} tokens; median of "
          f"{args.repeats} interleaved repeats):")  # fmt: skip
    rows = [
        ("total (`Delta.token_weights`)", parts["total"]),
        ("hidden-state capture (hooked no-grad forward)", parts["capture"]),
        ("weights (`delta_token_weights`)", parts["weights"]),
        ("metrics (`delta_weight_stats` + gather)", parts["stats"]),
        ("for reference: the same forward without the hook", parts["plain_pass"]),
    ]
    for label, seconds in rows:
        share = f", {seconds / cycle * 100:5.2f} % of a stock step cycle" if cycle else ""
        print(f"  {label:<50} {seconds * 1e3:10.3f} ms{share}")
    if cycle:
        implied = 1.0 + parts["total"] / cycle
        print(f"implied step ratio: 1 + {parts['total'] * 1e3:.2f} / {cycle * 1e3:.1f} ms = {implied:.4f}")


if __name__ == "__main__":
    main()
