"""The package's options on a real pretrained model, SmolLM2-135M-Instruct, against stock TRL/PEFT in one process.

    python bench/real_model.py                       # every part, 1 thread (room for a second process on 2 cores)
    python bench/real_model.py --parts grpo --repeats 7
    python bench/real_model.py --model PATH          # another local model (e.g. the toy, for a smoke run)
    python bench/real_model.py --quick               # make bench-quick's run: grpo, dpo, lora_init, fewer repeats

The model comes from the package index through the package's provider (converted once, cached). Three parts, each
the same measurement as the toy's benchmark, on the real weights, tokenizer and shapes:

1. ``grpo``: the loss path (forward + backward, where the options live) of stock ``trl.GRPOTrainer`` and of
   ``RLVRGRPOTrainer`` with each option (NSR, NSR expected, ACPO, off-policy diagnostics, RSI-S interval and
   quantile), interleaved on one fixed generated batch whose old log-probs carry noise, so the clip binds
   (`bench/grpo_overhead.py`'s ``loss_path_ratios``); DelTA's work, once per generation batch (its hook on TRL's
   old-log-prob pass and its weights, `bench/delta_overhead.py`'s ``cost_breakdown``); then stock whole steps for the implied step
   ratios 1 + (extra seconds per step) / (stock step seconds), the loss path's extra seconds taken from its median
   per-repeat ratio (robust to load drift) times the stock loss-path seconds. Full weights, ``num_iterations=2``.
2. ``dpo``: ``ISDPOTrainer`` (and with behaviour columns) against ``trl.DPOTrainer``, steps interleaved on one batch
   (`bench/dpo_overhead.py`'s ``build`` and ``step``).
3. ``lora_init``: RLPO, RLMO and our PiSSA/MiLoRA against PEFT's full-SVD PiSSA on the model's own weight matrices (one
   of each shape, from a middle layer; `bench/lora_init.py`'s ``run_size``), with the subspace errors against a
   float64 SVD of that weight.

4. ``precision``: stock GRPO whole steps in bf16 autocast (``bf16=True``, fp32 weights, as TRL's default does on a
   CPU that has bf16) against fp32 (``bf16=False``), alternated round by round; the median of the per-round ratios.

5. ``curation``: SELF, pass-rate sampling and DAPO dynamic sampling against stock GRPO, whole steps with LoRA on the
   real task (they act between steps, on the sampler and the generation loop: `bench/curation_real_model.py`).

vLLM against ``generate`` is `bench/vllm_cpu.py --model smollm2-135m-instruct`.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks, as modules

import torch


# Options whose work is in the loss path; DelTA's is once per generation batch (bench/delta_overhead.py), timed apart.
GRPO_ARMS = ("stock", "nsr", "nsr_expected", "acpo", "diag", "rsi", "rsi_quantile")
DPO_ARMS = ("stock", "is_dpo", "is_dpo_behavior")
LORA_LAYERS = ("self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj", "mlp.down_proj")
PARTS = ("grpo", "dpo", "lora_init", "precision", "curation")


def grpo_part(model_path: str, tmp: str, args) -> None:
    import delta_overhead
    import grpo_overhead

    options = {"batch": args.batch, "completion_length": args.completion_length, "bf16": False}
    loss = grpo_overhead.loss_path_ratios(model_path, os.path.join(tmp, "loss"), args.repeats, GRPO_ARMS, **options)
    delta = delta_overhead.cost_breakdown(model_path, os.path.join(tmp, "delta"), args.repeats, **options)
    timer = grpo_overhead.StepTimer()
    trainer = grpo_overhead.make_trainer(
        "stock", model_path, args.stock_steps, os.path.join(tmp, "stock"), callbacks=[timer], **options
    )
    trainer.train()
    stock_step = statistics.median(timer.times[1:])  # the first step warms up
    print(
        f"\nGRPO options vs stock TRL GRPO on {args.model}, CPU {torch.get_num_threads()} thread(s), full weights, "
        f"{args.batch} completions x {args.completion_length} tokens, num_iterations=2"
    )
    print(f"{'arm':<14}{'loss-path ratio':>17}{'implied step ratio':>20}")
    implied_ratios = {}
    for arm in GRPO_ARMS[1:]:
        # the extra time of the loss path from its per-repeat ratio (the interleaved, load-robust figure), over the
        # stock step: 1 + (ratio - 1) * stock loss-path seconds / stock step seconds
        implied = 1.0 + (loss["ratios"][arm] - 1.0) * loss["stock_seconds"] / stock_step
        print(f"{arm:<14}{loss['ratios'][arm]:>17.3f}{implied:>20.3f}")
        implied_ratios[arm] = implied
    # DelTA's seconds are per generation batch, which serves steps_per_generation_batch optimiser steps
    delta_implied = 1.0 + delta["total"] / (delta["steps_per_generation_batch"] * stock_step)
    print(f"{'delta':<14}{'-':>17}{delta_implied:>20.3f}")
    print(
        f"(delta: {delta['total']:.3f} s per generation batch of {delta['steps_per_generation_batch']:g} steps, its "
        f"hook riding on TRL's old-log-prob pass of {delta['plain_pass']:.2f} s; without reuse its own pass and "
        f"weights {delta['own_pass']:.2f} s; median of {args.repeats} interleaved repeats)"
    )
    print(
        f"(loss path: median of {args.repeats} interleaved repeats on one batch, stock {loss['stock_seconds']:.2f} s; "
        f"stock whole step {stock_step:.1f} s, median of {len(timer.times) - 1} steps after a warm-up step)"
    )
    print("target: step ratio <= 1.03")
    return {**implied_ratios, "delta": delta_implied}


def dpo_part(model_path: str, tmp: str, args) -> None:
    import dpo_overhead

    built = {arm: dpo_overhead.build(arm, model_path, args.pairs, os.path.join(tmp, arm)) for arm in DPO_ARMS}
    for arm in DPO_ARMS:  # warm-up
        dpo_overhead.step(*built[arm])
    times = {arm: [] for arm in DPO_ARMS}
    for i in range(args.dpo_steps):
        for arm in DPO_ARMS if i % 2 == 0 else DPO_ARMS[::-1]:
            times[arm].append(dpo_overhead.step(*built[arm]))
    print(f"\nIS-DPO vs stock DPO on {args.model}, {args.pairs} pairs per step, {args.dpo_steps} interleaved steps")
    print(f"{'arm':<18}{'step s (median)':>16}{'step ratio':>12}")
    ratios = {}
    for arm in DPO_ARMS:
        ratios[arm] = statistics.median(a / s for a, s in zip(times[arm], times["stock"]))
        print(f"{arm:<18}{statistics.median(times[arm]):>16.2f}{ratios[arm]:>12.3f}")
    print("(step ratio: median of the per-step ratios; target <= 1.02)")
    return ratios


def lora_init_part(model_path: str, args) -> None:
    import lora_init
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    layer = model.config.num_hidden_layers // 2
    settings = argparse.Namespace(rank=args.rank, repeats=args.lora_repeats, decay=None, device="cpu")
    print(f"\nLoRA initialisers vs PEFT's full-SVD PiSSA on {args.model}'s layer {layer} weights, r = {args.rank}")
    speedups = {}
    for name in LORA_LAYERS:
        weight = model.get_submodule(f"model.layers.{layer}.{name}").weight
        summary, _ = lora_init.run_size(*weight.shape, settings, weight=weight, label=f"layer {layer} {name}")
        speedups[name] = {contender: row[1] for contender, row in summary.items()}
    return speedups


def precision_part(model_path: str, tmp: str, args) -> None:
    import grpo_overhead

    options = {"batch": args.batch, "completion_length": args.completion_length}
    medians = {"fp32": [], "bf16": []}
    for r in range(args.precision_rounds):
        for name in ("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32"):
            timer = grpo_overhead.StepTimer()
            out = os.path.join(tmp, f"precision-{name}-{r}")
            trainer = grpo_overhead.make_trainer(
                "stock", model_path, args.stock_steps, out, callbacks=[timer], bf16=name == "bf16", **options
            )
            trainer.train()
            medians[name].append(statistics.median(timer.times[1:]))
    from trl_rlvr_ext.provenance import cpu_info

    ratios = [b / f for b, f in zip(medians["bf16"], medians["fp32"])]
    cpu = cpu_info()
    native = {True: "native bf16", False: "no native bf16", None: "bf16 support unknown"}[cpu["bf16"]]
    print(
        f"\nStock GRPO step, bf16 autocast vs fp32, on {args.model}, CPU {cpu['model']} ({native}), "
        f"{torch.get_num_threads()} thread(s)"
    )
    print(f"fp32 {statistics.median(medians['fp32']):.2f} s, bf16 {statistics.median(medians['bf16']):.2f} s per step")
    print(
        f"step ratio bf16 / fp32: {statistics.median(ratios):.3f} (per round {', '.join(f'{x:.3f}' for x in ratios)})"
    )


# bench/targets.py's names for this benchmark's options, where they differ from the arm's
QUICK_NAMES = {"diag": "diagnostics"}
# --quick: `make bench-quick`'s settings (bench/quick.py), the parts whose options have targets
QUICK = {"parts": "grpo,dpo,lora_init", "repeats": 5, "stock_steps": 2, "dpo_steps": 10, "lora_repeats": 5}


def quick_summary(results: dict) -> None:
    """Report the ratios `make bench-quick` checks: each GRPO option's implied step ratio, each IS-DPO arm's step
    ratio, and RLPO's default init (the authors' float32 full SVD) over PEFT's full-SVD PiSSA, the median over the
    weights."""
    import quick

    for arm, ratio in results.get("grpo", {}).items():
        quick.report(QUICK_NAMES.get(arm, arm), ratio)
    for arm, ratio in results.get("dpo", {}).items():
        if arm != "stock":
            quick.report(arm, ratio)
    if "lora_init" in results:
        speedups = results["lora_init"].values()
        quick.report("lora_init", statistics.median(1 / row["rlpo (full SVD f32)"] for row in speedups))


def main(argv=None) -> int:
    import quick

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a pretrained name or a local model path")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--repeats", type=int, default=5, help="grpo: interleaved loss-path repeats")
    parser.add_argument("--batch", type=int, default=8, help="grpo: completions per step (groups of 8)")
    parser.add_argument("--completion-length", type=int, default=16, help="grpo: tokens per completion")
    parser.add_argument("--stock-steps", type=int, default=3, help="grpo: stock whole steps (the first warms up)")
    parser.add_argument("--pairs", type=int, default=4, help="dpo: preference pairs per step")
    parser.add_argument("--dpo-steps", type=int, default=8, help="dpo: interleaved steps per arm")
    parser.add_argument("--rank", type=int, default=16, help="lora_init: LoRA rank")
    parser.add_argument("--lora-repeats", type=int, default=3, help="lora_init: repeats per weight")
    parser.add_argument("--precision-rounds", type=int, default=2, help="precision: alternated rounds per arm")
    parser.add_argument(
        "--curation-steps", type=int, default=6, help="curation: steps per run (the first generation cycle warms up)"
    )
    parser.add_argument("--curation-rounds", type=int, default=3, help="curation: alternated rounds per arm")
    quick.quick_defaults(parser, argv, **QUICK)
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; choose among {', '.join(PARTS)}.")
    if args.stock_steps < 2:
        parser.error("--stock-steps must be at least 2: the first step is a warm-up and is not counted.")
    import curation_real_model

    if (why := curation_real_model.check_steps(args.curation_steps)) is not None:
        parser.error(f"--curation-steps {args.curation_steps} {why}")
    torch.set_num_threads(args.threads)
    import datasets
    import transformers

    from trl_rlvr_ext.data import resolve_model_name_or_path

    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    model_path = resolve_model_name_or_path(args.model)
    start = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if "grpo" in parts:
            results["grpo"] = grpo_part(model_path, tmp, args)
        if "dpo" in parts:
            results["dpo"] = dpo_part(model_path, tmp, args)
        if "lora_init" in parts:
            results["lora_init"] = lora_init_part(model_path, args)
        if "precision" in parts:
            precision_part(model_path, tmp, args)
        if "curation" in parts:
            curation_real_model.curation_part(model_path, tmp, args.curation_steps, args.curation_rounds, args.model)
    print(f"\n{args.model}: parts {', '.join(parts)} in {time.perf_counter() - start:.0f} s")
    if args.quick:
        quick_summary(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
