r"""``trl-rlvr-ext demo --model smollm2-135m-instruct``: GRPO + LoRA on a real pretrained model, offline, on CPU.

    trl-rlvr-ext demo --model smollm2-135m-instruct                  # stock GRPO + LoRA, about 15-25 min on 2 cores
    trl-rlvr-ext demo --model smollm2-135m-instruct --method nsr     # the same with NSR (or acpo, delta, self)
    trl-rlvr-ext demo --model smollm2-135m-instruct --quick          # a 2-step smoke run of the pipeline

1. The model from the package index (`trl_rlvr_ext.pretrained`), converted once and cached.
2. Held-out pass@1 before training: ``--eval-samples`` samples on each of the first ``--eval-problems`` held-out
   problems of ``--dataset`` (a task the screening, ``docs/evidence/screening.md``, found learnable for this model).
3. `RLVRGRPOTrainer` with a LoRA adapter on the top ``--lora-layers`` layers (the backward pass stops there, so a step
   costs little more than its forward passes), the DAPO loss, each generation batch used for
   ``--steps-per-generation`` optimiser steps (so the importance ratio moves and the clip rules act), and the
   ``--method`` option on.
4. Held-out pass@1 after, on the same problems with the same sampling seed, and the paired gain with its 95 %
   interval over problems. One record (per-problem counts before and after, the train rewards, times, provenance)
   goes to ``<output-dir>/record.json`` and, with ``--records``, is appended to a JSONL file.
"""

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from .common import HelpFormatter
from .demo_common import check_demo_batch, demo_grpo_config


PROG = "trl-rlvr-ext demo"
# The task of the screening's first learnable candidate (docs/evidence/screening.md), with room for training.
DEFAULT_DATASET = (
    "reasoning_gym:products?min_digits=1&max_digits=1&size=16&test_size=32&dedup=near&format=chat&answer=last_number"
)
# --method -> the RLVRGRPOConfig options it turns on (each method's own defaults: its paper's values).
METHODS = {
    "none": {},
    "nsr": {"clip_recovery": "nsr"},
    "acpo": {"adaptive_clip": "acpo"},
    "delta": {"token_credit": "delta"},
    "self": {"curation": "self", "curation_id_column": "idx"},
}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="GRPO + LoRA on a real pretrained model (offline, from the package index): held-out pass@1 "
        "before and after, the paired gain with its 95 % interval.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--model", default=None, help="A pretrained model name (smollm2-135m-instruct) or a path.")
    parser.add_argument("--dataset", default=DEFAULT_DATASET, help="The task (a dataset name with a test split).")
    parser.add_argument("--method", default="none", choices=sorted(METHODS), help="The package option to turn on.")
    parser.add_argument("--seed", type=int, default=0, help="Training seed (LoRA init, sampling, shuffling).")
    parser.add_argument("--output-dir", default=None, help="Where the adapter and the record go (default: outputs/).")
    parser.add_argument("--records", default=None, help="Also append the record to this JSONL file.")
    parser.add_argument(
        "--num-threads", type=int, default=1, help="torch threads (two seeds side by side on 2 cores)."
    )
    parser.add_argument("--quick", action="store_true", help="A smoke run: 2 steps, 4 problems x 2 samples.")
    rl = parser.add_argument_group("GRPO + LoRA")
    rl.add_argument("--max-steps", type=int, default=16, help="Optimiser steps.")
    rl.add_argument("--learning-rate", type=float, default=3e-4, help="Constant learning rate of AdamW.")
    rl.add_argument("--num-prompts", type=int, default=4, help="Prompts per generation batch.")
    rl.add_argument("--num-generations", type=int, default=8, help="Completions per prompt (the GRPO group).")
    rl.add_argument("--steps-per-generation", type=int, default=2, help="Optimiser steps per generation batch.")
    rl.add_argument("--max-completion-length", type=int, default=16, help="Tokens per completion.")
    rl.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature (training and evaluation).")
    rl.add_argument("--lora-r", type=int, default=16, help="LoRA rank.")
    rl.add_argument("--lora-alpha", type=int, default=32, help="LoRA alpha.")
    rl.add_argument("--lora-layers", type=int, default=8, help="LoRA on this many top decoder layers (all linear).")
    ev = parser.add_argument_group("evaluation")
    ev.add_argument("--eval-problems", type=int, default=32, help="Held-out problems (the first of the test split).")
    ev.add_argument("--eval-samples", type=int, default=8, help="Samples per held-out problem.")
    ev.add_argument("--eval-seed", type=int, default=1234, help="Sampling seed of both evaluations (paired).")
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    check_demo_batch(
        parser,
        args,
        ("max_steps", "num_prompts", "steps_per_generation", "eval_problems", "eval_samples", "lora_layers"),
    )
    if args.method in ("nsr", "acpo") and args.steps_per_generation < 2:
        parser.error(
            f"--method {args.method} acts on the clip, which only binds when a generation batch is reused: set "
            "--steps-per-generation 2 or more (with 1 the importance ratio is exactly 1)."
        )


def _evaluate(model, tokenizer, rows, reward, args, label):
    from ..evaluation import evaluate_pass_at_k
    from ..sampling import SamplingSettings

    return evaluate_pass_at_k(
        model,
        rows,
        reward,
        tokenizer=tokenizer,
        sampling=SamplingSettings(
            num_samples=args.eval_samples,
            temperature=args.temperature,
            top_p=1.0,
            max_new_tokens=args.max_completion_length,
            seed=args.eval_seed,
        ),
        batch_size=128,
        label=label,
        confidence_level=None,
    )


def run_pretrained_demo(args: argparse.Namespace) -> dict:
    """The steps of the module docstring; returns the record (also written to ``<output-dir>/record.json``)."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..data import load_named_dataset, resolve_model_name_or_path
    from ..grpo.grpo_trainer import RLVRGRPOTrainer
    from ..provenance import provenance
    from ..rewards import get_reward_func

    torch.set_num_threads(args.num_threads)
    start = time.perf_counter()
    output_dir = Path(args.output_dir or f"outputs/demo_{Path(args.model).name}_{args.method}_seed{args.seed}")
    output_dir.mkdir(parents=True, exist_ok=True)
    print(f"[1/4] Model {args.model}", flush=True)
    model_path = resolve_model_name_or_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    data = load_named_dataset(args.dataset)
    if data["test"].num_rows < args.eval_problems:
        raise ValueError(
            f"--eval-problems {args.eval_problems}: {args.dataset} has {data['test'].num_rows} held-out problems; "
            "lower --eval-problems or raise the dataset's test_size."
        )
    rows = [data["test"][i] for i in range(args.eval_problems)]
    reward = get_reward_func("reasoning_gym") if args.dataset.startswith("reasoning_gym:") else None
    if reward is None:
        raise ValueError(f"--dataset {args.dataset!r}: the demo grades reasoning_gym: tasks; name one of those.")

    print(f"[2/4] Held-out pass@1 before ({args.eval_problems} problems x {args.eval_samples} samples)", flush=True)
    before = _evaluate(model, tokenizer, rows, reward, args, "before")
    print(f"      {before.pass_at_k[1]:.3f}", flush=True)

    num_layers = model.config.num_hidden_layers
    if args.lora_layers > num_layers:
        raise ValueError(f"--lora-layers {args.lora_layers}: the model has {num_layers} decoder layers.")
    peft_config = LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=0.0,
        target_modules=list(LORA_TARGETS),
        layers_to_transform=list(range(num_layers - args.lora_layers, num_layers)),
        task_type="CAUSAL_LM",
    )
    config = demo_grpo_config(
        args,
        str(output_dir),
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        logging_steps=1,
        **METHODS[args.method],
    )
    trainer = RLVRGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data["train"],
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    print(
        f"[3/4] GRPO + LoRA (r {args.lora_r}, top {args.lora_layers} layers), method {args.method!r}: "
        f"{args.max_steps} steps",
        flush=True,
    )
    t0 = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - t0
    trainer.save_model(str(output_dir))

    print("[4/4] Held-out pass@1 after, same problems and sampling seed", flush=True)
    after = _evaluate(trainer.model, tokenizer, rows, reward, args, "after")
    logs = [log for log in trainer.state.log_history if "reward" in log]
    record = {
        "study": "real_model_demo",
        "model": args.model,
        "dataset": args.dataset,
        "method": args.method,
        "seed": args.seed,
        "settings": {
            key: getattr(args, key)
            for key in (
                "max_steps",
                "learning_rate",
                "num_prompts",
                "num_generations",
                "steps_per_generation",
                "max_completion_length",
                "temperature",
                "lora_r",
                "lora_alpha",
                "lora_layers",
                "eval_problems",
                "eval_samples",
                "eval_seed",
                "quick",
            )
        },
        "before_num_correct": [int(c) for c in before.num_correct],
        "after_num_correct": [int(c) for c in after.num_correct],
        "train_reward": [round(float(log["reward"]), 6) for log in logs],
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.perf_counter() - start, 1),
        "command": args.command,
        "provenance": provenance(model_path, args.num_threads),
    }
    (output_dir / "record.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    if args.records:
        Path(args.records).parent.mkdir(parents=True, exist_ok=True)
        with open(args.records, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    print(summary_text(record, output_dir), flush=True)
    return record


def paired_gains(records: list[dict]):
    """Per (seed, problem) gain of pass@1, after minus before: an array of shape (seeds, problems)."""
    import numpy as np

    gains = [
        (np.array(r["after_num_correct"]) - np.array(r["before_num_correct"])) / r["settings"]["eval_samples"]
        for r in records
    ]
    if len({g.shape for g in gains}) != 1:
        raise ValueError("The records evaluate different numbers of problems: render one design at a time.")
    return np.stack(gains)


def summary_text(record: dict, output_dir) -> str:
    from ..evaluation.paired import crossed_percentile_interval

    gains = paired_gains([record])
    low, high = crossed_percentile_interval(gains)
    settings = record["settings"]
    before = sum(record["before_num_correct"]) / (settings["eval_problems"] * settings["eval_samples"])
    after = sum(record["after_num_correct"]) / (settings["eval_problems"] * settings["eval_samples"])
    rewards = record["train_reward"]
    lines = [
        "",
        (
            f"Held-out pass@1 ({settings['eval_problems']} problems never trained on, {settings['eval_samples']} samples "
            f"each at temperature {settings['temperature']}): {before:.3f} -> {after:.3f}"
        ),
        (
            f"  gain {after - before:+.3f}, 95 % interval over problems [{low:+.3f}, {high:+.3f}] (one seed; "
            "records of several seeds give the interval over problems and seeds)"
        ),
    ]
    if rewards:
        lines.append(f"Train reward: first step {rewards[0]:.3f}, last step {rewards[-1]:.3f}")
    lines += [
        f"Adapter and record: {output_dir}",
        (
            f"Wall time: {record['total_seconds']:.0f} s (training {record['train_seconds']:.0f} s) on "
            f"{record['provenance']['num_threads']} thread(s)"
        ),
    ]
    if settings.get("quick"):
        lines.insert(1, "--quick: a smoke run of the pipeline; these numbers mean nothing.")
    return "\n".join(lines)


def cli_main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.model:
        parser.error("--model is required (e.g. --model smollm2-135m-instruct).")
    if args.quick:
        args.max_steps, args.eval_problems, args.eval_samples = 2, 4, 2
    _check(parser, args)
    args.command = "trl-rlvr-ext demo " + shlex.join(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    run_pretrained_demo(args)
    return 0
