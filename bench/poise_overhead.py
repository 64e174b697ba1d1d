"""Per-step cost of POISE's value baseline (`value_baseline="poise"`) against stock TRL GRPO, side by side in one
process, both with groups of 2 (POISE's n = 2).

    python bench/poise_overhead.py [--rounds 5] [--steps 10] [--repeats 10] [--hidden 64] [--layers 4]
    python bench/poise_overhead.py --quick     # make bench-quick's run (bench/quick.py): 1 round of 4 steps, 3 repeats
    python bench/poise_overhead.py --shape qwen2-0.5b --rounds 2 --steps 4 --repeats 3 --batch 8 \
        --completion-length 4 --threads 2                     # Qwen2.5-0.5B's shape (random weights, built here), CPU
    python bench/poise_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU

POISE's work is not in the loss: once per generation batch it runs one extra forward pass without gradient with a hook
on one decoder layer (the features and the token entropies), gathers the features, predicts, and refits the probe
(PCA + ridge, float64 on the CPU) on its whole buffer. The arm fits the probe after the first batch and refits it after
every batch (bootstrap and warm-up of 1: the steady state; the buffer grows up to 4096 rows over the run, so a longer
run refits on more rows). Two measurements, on the settings of bench/grpo_overhead.py (``num_iterations=2``):

1. *Whole steps*, stock `trl.GRPOTrainer` against `RLVRGRPOTrainer(value_baseline="poise")`, alternated arm by arm for
   ``--rounds`` rounds of ``--steps`` steps; per round the mean step time from step 3 on; the median of the ratios.
2. *Where POISE's cost goes*, on one generated batch, ``--repeats`` times: the hooked forward pass and the features
   (`Poise.features`), and the probe's prediction, advantages and refit (`PoiseValueBaseline.advantages` + `update`)
   on a buffer of ``--batch`` × ``--steps`` rows.

The implied step ratio is 1 + (POISE's seconds per generation batch) / (steps per generation batch × stock step
seconds): the least load-sensitive figure on a shared CPU.
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


try:  # run as a script (bench/ on sys.path) or imported as bench.poise_overhead
    import grpo_overhead
except ImportError:
    from bench import grpo_overhead


ARMS = ("stock", "poise")
SKIP_STEPS = 2  # the first generate-and-reuse cycle (num_iterations=2): warm-up


def cost_breakdown(model_path: str, out_dir: str, repeats: int, buffer_batches: int, **options) -> dict[str, float]:
    """Median seconds, per generation batch, of POISE's parts (see the module docstring, 2)."""
    trainer = grpo_overhead.make_trainer("poise", model_path, 2, out_dir, num_generations=2, **options)
    trainer.train()
    batch = [trainer.train_dataset[i] for i in range(trainer.args.generation_batch_size)]
    output = GRPOTrainer._generate_and_score_completions(trainer, batch)  # TRL's, without POISE
    features = trainer.method("poise").features(output)
    dim = (features.shape[1] - 3) // 2
    parts = features[:, :dim], features[:, dim : 2 * dim], features[:, 2 * dim :]
    rewards = torch.rand(features.shape[0], generator=torch.Generator().manual_seed(0)).round()
    state = trainer.method("poise").baseline
    # the refit below sees buffer_batches batches of rows (a --steps run's buffer): fill it to one batch less
    while state.buffer["targets"].shape[0] < (buffer_batches - 1) * features.shape[0]:
        state.update(*parts, rewards)
    times = {"features": [], "probe": []}
    for r in range(repeats + 1):
        grpo_overhead.synchronize()
        start = time.perf_counter()
        trainer.method("poise").features(output)
        grpo_overhead.synchronize()
        middle = time.perf_counter()
        result, _ = state.advantages(rewards, *parts)
        state.update(*parts, result.targets)
        end = time.perf_counter()
        state.buffer = {k: v[: -features.shape[0]] for k, v in state.buffer.items()}  # the same buffer size each time
        if r > 0:  # the first repeat warms up
            times["features"].append(middle - start)
            times["probe"].append(end - middle)
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians["total"] = medians["features"] + medians["probe"]
    medians["buffer_rows"] = state.buffer["targets"].shape[0] + features.shape[0]
    medians["steps_per_generation_batch"] = trainer.args.steps_per_generation * trainer.args.num_iterations
    medians["steps_per_generation_batch"] /= trainer.args.gradient_accumulation_steps
    return medians


def main():
    parser = grpo_overhead.common_parser(
        __doc__, rounds=5, steps=10, repeats=10, quick_settings={"rounds": 1, "steps": 4, "repeats": 3}
    )
    args = parser.parse_args()
    if args.steps <= SKIP_STEPS:
        parser.error(f"--steps must be above {SKIP_STEPS} (the first rollout's steps are dropped).")
    with tempfile.TemporaryDirectory() as tmp:
        options, model_path, shape = grpo_overhead.setup(parser, args, tmp)
        parts = cost_breakdown(model_path, os.path.join(tmp, "parts"), args.repeats, args.steps, **options)
        gc.collect()
        step_ratios, stock_steps = grpo_overhead.alternated_rounds(
            ARMS, model_path, args.steps, args.rounds, tmp, SKIP_STEPS, statistics.mean, num_generations=2, **options
        )
        ratios = step_ratios["poise"]

    where = f"CPU, {torch.get_num_threads()} threads" if args.device == "cpu" else torch.cuda.get_device_name()
    print(
        f"\nPOISE vs stock TRL GRPO (both n = 2), {where}, {shape}, dtype {args.dtype}, {args.batch} completions x "
        f"{args.completion_length} tokens per step, one generation batch per {parts['steps_per_generation_batch']:g} "
        "steps"
    )
    stock_step = statistics.median(stock_steps) if stock_steps else None
    if stock_step is not None:
        print(
            f"whole-step ratio: {statistics.median(ratios):.3f} (median of {args.rounds} alternated rounds, per-round "
            f"ratios {', '.join(f'{x:.3f}' for x in ratios)}; stock {stock_step * 1e3:.1f} ms/step)"
        )
    cycle = parts["steps_per_generation_batch"] * stock_step if stock_step else None
    print(f"\nPOISE per generation batch (median of {args.repeats} repeats, buffer {parts['buffer_rows']} rows):")
    rows = [
        ("total", parts["total"]),
        ("features (hooked no-grad forward, pooling, entropies)", parts["features"]),
        ("probe (predict, advantages, append, refit)", parts["probe"]),
    ]
    for label, seconds in rows:
        share = f", {seconds / cycle * 100:5.2f} % of a stock step cycle" if cycle else ""
        print(f"  {label:<55} {seconds * 1e3:10.3f} ms{share}")
    if cycle:
        implied = 1.0 + parts["total"] / cycle
        print(f"implied step ratio: 1 + {parts['total'] * 1e3:.2f} / {cycle * 1e3:.1f} ms = {implied:.4f}")
        if args.quick:
            grpo_overhead.quick.report("poise", implied)


if __name__ == "__main__":
    main()
