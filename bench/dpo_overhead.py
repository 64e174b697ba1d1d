"""Per-step cost of IS-DPO against stock TRL DPO, side by side in one process.

    python bench/dpo_overhead.py [--rounds 5] [--steps 40] [--batch 16] [--hidden 64] [--layers 4] [--behavior]

Builds stock `trl.DPOTrainer` and `ISDPOTrainer` (importance_sampling=True, behaviour policy = the reference; with
`--behavior` also an arm whose behaviour log-probs come from dataset columns) on the same model, data and seed. Each
round interleaves the arms step by step (stock, IS, IS, stock, ...) on the same batch, so that the load of a shared
machine hits every arm alike; a step is TRL's full `training_step` (forward of policy and reference, loss, metrics,
backward) plus the optimizer step. Reports per arm the median step time and the median of the per-round ratios of
median step times against stock. Target: step ratio <= 1.02. IS-DAA adds no forward pass: a few element-wise ops on
(batch,) tensors and one gather for the `is/*` metrics.
"""

import argparse
import os
import statistics
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets
import transformers
from trl import DPOConfig, DPOTrainer

from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer
from trl_rlvr_ext.dpo.behavior import BEHAVIOR_COLUMNS
from trl_rlvr_ext.toy import save_tiny_model
from trl_rlvr_ext.toy.preference import make_toy_preference_dataset


def build(arm: str, model_path: str, batch: int, out_dir: str):
    common = {
        "output_dir": out_dir,
        "per_device_train_batch_size": batch,
        "max_length": 32,
        "learning_rate": 1e-5,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "seed": 0,
        "disable_tqdm": True,
    }
    dataset = make_toy_preference_dataset(batch, seed=0)
    if arm == "stock":
        trainer = DPOTrainer(model=model_path, args=DPOConfig(**common), train_dataset=dataset)
    else:
        if arm == "is_dpo_behavior":
            dataset = dataset.add_column(BEHAVIOR_COLUMNS[0], [-20.0] * len(dataset))
            dataset = dataset.add_column(BEHAVIOR_COLUMNS[1], [-21.0] * len(dataset))
        trainer = ISDPOTrainer(model=model_path, args=ISDPOConfig(**common), train_dataset=dataset)
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by `train()` in Trainer; we drive the steps ourselves
    inputs = next(iter(trainer.get_train_dataloader()))
    return trainer, inputs


def step(trainer, inputs) -> float:
    start = time.perf_counter()
    trainer.training_step(trainer.model, inputs)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="Steps per arm and round.")
    parser.add_argument("--batch", type=int, default=16, help="Preference pairs per step.")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--behavior", action="store_true", help="Also time IS-DPO with behaviour log-prob columns.")
    cli = parser.parse_args()
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    arms = ["stock", "is_dpo", *(["is_dpo_behavior"] if cli.behavior else [])]
    medians = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        model_path = save_tiny_model(
            os.path.join(tmp, "model"),
            hidden_size=cli.hidden,
            num_hidden_layers=cli.layers,
            intermediate_size=4 * cli.hidden,
        )
        built = {arm: build(arm, model_path, cli.batch, os.path.join(tmp, arm)) for arm in arms}
        for arm in arms:  # warm-up: allocator, thread pools
            for _ in range(3):
                step(*built[arm])
        for round_index in range(cli.rounds):
            times = {arm: [] for arm in arms}
            for step_index in range(cli.steps):
                order = arms if step_index % 2 == 0 else arms[::-1]  # alternate which arm goes first
                for arm in order:
                    times[arm].append(step(*built[arm]))
            for arm in arms:
                medians[arm].append(statistics.median(times[arm]))
            print(
                f"round {round_index + 1}/{cli.rounds}: "
                + ", ".join(f"{arm} {1e3 * medians[arm][-1]:.2f} ms/step" for arm in arms),
                flush=True,
            )

    print(f"\nIS-DPO vs stock DPO ({cli.rounds} rounds x {cli.steps} interleaved steps, batch {cli.batch} pairs)")
    print(f"{'arm':<18}{'step ms (median)':>18}{'step ratio':>12}")
    for arm in arms:
        ratio = statistics.median(a / s for a, s in zip(medians[arm], medians["stock"], strict=True))
        print(f"{arm:<18}{1e3 * statistics.median(medians[arm]):>18.2f}{ratio:>12.3f}")
    print("target: step ratio <= 1.02")


if __name__ == "__main__":
    main()
