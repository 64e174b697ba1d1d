"""Per-step cost of DelTA's token credit (`token_credit="delta"`) against stock TRL GRPO, side by side in one process.

    python bench/delta_overhead.py [--rounds 5] [--steps 10] [--repeats 20] [--hidden 64] [--layers 4]
    python bench/delta_overhead.py --quick     # make bench-quick's run (bench/quick.py): 1 round of 4 steps, 3 repeats
    python bench/delta_overhead.py --shape qwen2-0.5b --rounds 2 --steps 4 --repeats 3 --batch 8 \
        --completion-length 4 --threads 2                     # Qwen2.5-0.5B's shape (random weights, built here), CPU
    python bench/delta_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU

DelTA's work is not in the loss: once per generation batch it reads the hidden states entering the LM head (a hook
on the backbone) and computes the weights from them. When rollouts are reused (these settings: ``num_iterations=2``,
one generation every two optimizer steps) the hook rides on the old-log-prob pass TRL makes anyway; otherwise DelTA
makes its own no-grad pass. Two measurements, on the settings of bench/grpo_overhead.py:

1. *Whole steps*, stock `trl.GRPOTrainer` against `RLVRGRPOTrainer(token_credit="delta")`, alternated arm by arm for
   ``--rounds`` rounds of ``--steps`` steps. Per round, the mean step time after the first rollout (steps 3 onwards:
   whole generate-and-reuse cycles, so that the generation steps, where DelTA costs, are counted in proportion); the
   result is the median of the per-round ratios.
2. *Where DelTA's cost goes*, on one generated batch, ``--repeats`` interleaved times of three things: TRL's
   old-log-prob pass alone (``plain_pass``); the same pass with DelTA's hook riding on it, then `Delta.token_weights`
   on its result (what a reused batch costs); and `Delta.token_weights` making its own pass (``own_pass``: what a
   batch costs when TRL makes no old-log-prob pass, e.g. ``num_iterations=1``). DelTA's cost on a reused batch
   (``total``) is timed directly: the seconds inside its hook plus `Delta.token_weights`; within it the weights
   (`delta_token_weights`) and the metrics (`delta_weight_stats` and the gather), timed by wrapping them, and the
   hidden-state capture (the rest: the hook's copies of the completion positions, their concatenation). As a check,
   ``pass_difference`` is the median of the per-repeat differences shared − plain (the same figure, through the
   noise of two timings of one forward pass).

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
from trl_rlvr_ext.grpo.hooked_forward import capture_completion_states


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
    method = trainer.method("delta")
    if method.shared_pass is None:
        raise RuntimeError("DelTA makes its own pass in these settings: this breakdown times the shared one.")
    batch = [trainer.train_dataset[i] for i in range(trainer.args.generation_batch_size)]
    output = GRPOTrainer._generate_and_score_completions(trainer, batch)  # TRL's, without the weights
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    chunk = trainer.args.per_device_train_batch_size

    def trl_pass(_inputs=None):  # TRL's old-log-prob pass over the batch: the trainer's (training) mode, no gradient
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, attention, output["completion_ids"].size(1), batch_size=chunk
            )
        return {**output, "old_per_token_logps": logps}

    in_hook = [0.0]

    def timed_capture(logits_to_keep, into):  # DelTA's hook, timed
        hook = capture_completion_states(logits_to_keep, into)

        def timed(*args):
            grpo_overhead.synchronize()
            start = time.perf_counter()
            hook(*args)
            grpo_overhead.synchronize()
            in_hook[0] += time.perf_counter() - start

        return timed

    def shared():  # the same pass with DelTA's hook riding on it, then the weights from what it captured
        in_hook[0] = 0.0
        scored = method.shared_pass.wrap(trl_pass, None)
        grpo_overhead.synchronize()
        start = time.perf_counter()
        method.token_weights(scored)
        grpo_overhead.synchronize()
        return in_hook[0] + time.perf_counter() - start

    def own():  # DelTA's own pass (TRL makes none when rollouts are not reused)
        shared_pass, method.shared_pass = method.shared_pass, None
        try:
            method.token_weights(output)
        finally:
            method.shared_pass = shared_pass

    weights, stats = Stopwatch("delta_token_weights"), Stopwatch("delta_weight_stats")
    runs = {"shared": shared, "plain": trl_pass, "own": own}
    times = {name: [] for name in (*runs, "weights", "stats", "delta")}
    trainer.model.train()
    method.shared_pass.hook_factory = timed_capture
    try:
        for r in range(repeats + 2):
            order = list(runs)[r % 3 :] + list(runs)[: r % 3]  # each goes first in turn
            for what in order:
                grpo_overhead.synchronize()
                start = time.perf_counter()
                delta = runs[what]()
                grpo_overhead.synchronize()
                elapsed = time.perf_counter() - start
                w, s = weights.take(), stats.take()
                if r < 2:  # warm-up repeats dropped
                    continue
                times[what].append(elapsed)
                if what == "shared":
                    times["delta"].append(delta)
                    times["weights"].append(w)
                    times["stats"].append(s)
    finally:
        method.shared_pass.hook_factory = capture_completion_states
        weights.close()
        stats.close()
    medians = {
        "total": statistics.median(times["delta"]),
        "weights": statistics.median(times["weights"]),
        "stats": statistics.median(times["stats"]),
        "capture": statistics.median(d - w - s for d, w, s in zip(times["delta"], times["weights"], times["stats"])),
        "pass_difference": statistics.median(s - p for s, p in zip(times["shared"], times["plain"])),
        "plain_pass": statistics.median(times["plain"]),
        "own_pass": statistics.median(times["own"]),
    }
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
        ("total (reused batch: hook + `Delta.token_weights`)", parts["total"]),
        ("hidden-state capture (the hook's copies)", parts["capture"]),
        ("weights (`delta_token_weights`)", parts["weights"]),
        ("metrics (`delta_weight_stats` + gather)", parts["stats"]),
        ("check: shared pass - TRL's pass (two timings)", parts["pass_difference"]),
        ("for reference: TRL's old-log-prob pass", parts["plain_pass"]),
        ("without reuse: DelTA's own pass and weights", parts["own_pass"]),
    ]
    for label, seconds in rows:
        share = f", {seconds / cycle * 100:5.2f} % of a stock step cycle" if cycle else ""
        print(f"  {label:<50} {seconds * 1e3:10.3f} ms{share}")
    if cycle:
        implied = 1.0 + parts["total"] / cycle
        print(f"implied step ratio: 1 + {parts['total'] * 1e3:.2f} / {cycle * 1e3:.1f} ms = {implied:.4f}")


if __name__ == "__main__":
    main()
