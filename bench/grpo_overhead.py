"""Per-step cost of NSR clip recovery against stock TRL GRPO, side by side in one process.

    python bench/grpo_overhead.py [--rounds 5] [--steps 12] [--hidden 64] [--layers 4]

Runs stock `trl.GRPOTrainer` and `RLVRGRPOTrainer(clip_recovery="nsr")` (and "nsr_expected") on the same model,
data and seed, alternating A/B/C rounds so drift in machine load hits each arm alike. Reports, per arm, the median
optimizer-step time and the median time of the loss computation (`_compute_loss`, where NSR lives), and the ratios
against stock (medians of per-round ratios). Target: step-time ratio <= 1.03. num_iterations=2, so the importance
ratio is not identically 1 and the clip (hence the rescue) is active.
"""

import argparse
import os
import statistics
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.toy import save_tiny_model


def reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def run(arm: str, model_path: str, steps: int, out_dir: str) -> tuple[list[float], list[float]]:
    common = {
        "output_dir": out_dir,
        "per_device_train_batch_size": 32,
        "num_generations": 8,
        "max_completion_length": 16,
        "num_iterations": 2,
        "learning_rate": 1e-3,
        "max_steps": steps,
        "logging_steps": steps,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "gradient_checkpointing": False,
        "seed": 0,
        "epsilon_high": 0.28,
        "disable_tqdm": True,
    }
    if arm == "stock":
        trainer_cls, args = GRPOTrainer, GRPOConfig(**common)
    else:
        trainer_cls, args = RLVRGRPOTrainer, RLVRGRPOConfig(**common, clip_recovery=arm)
    dataset = Dataset.from_dict({"prompt": [f"{i}+{3 * i}=" for i in range(256)]})
    timer = StepTimer()
    trainer = trainer_cls(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset, callbacks=[timer])
    loss_times = []
    compute_loss = trainer._compute_loss

    def timed_compute_loss(model, inputs):
        start = time.perf_counter()
        out = compute_loss(model, inputs)
        loss_times.append(time.perf_counter() - start)
        return out

    trainer._compute_loss = timed_compute_loss
    trainer.train()
    # drop the first step of each run (allocator / first generation warm-up)
    return timer.times[1:], loss_times[2:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    arms = ["stock", "nsr", "nsr_expected"]
    step = {arm: [] for arm in arms}
    loss = {arm: [] for arm in arms}
    step_ratio = {arm: [] for arm in arms[1:]}
    loss_ratio = {arm: [] for arm in arms[1:]}
    with tempfile.TemporaryDirectory() as tmp:
        model_path = save_tiny_model(
            os.path.join(tmp, "model"),
            hidden_size=args.hidden,
            intermediate_size=4 * args.hidden,
            num_hidden_layers=args.layers,
        )
        for r in range(args.rounds):
            order = arms if r % 2 == 0 else arms[::-1]
            medians = {}
            for arm in order:
                s, lt = run(arm, model_path, args.steps, os.path.join(tmp, arm))
                step[arm] += s
                loss[arm] += lt
                medians[arm] = (statistics.median(s), statistics.median(lt))
            for arm in arms[1:]:
                step_ratio[arm].append(medians[arm][0] / medians["stock"][0])
                loss_ratio[arm].append(medians[arm][1] / medians["stock"][1])
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{a} step x{step_ratio[a][-1]:.3f}" for a in arms[1:]))

    print(f"\nGRPO step time, NSR vs stock TRL ({args.rounds} alternating rounds x {args.steps} steps, CPU)")
    print(f"{'arm':<14}{'step ratio':>12}{'loss-fn ratio':>15}")
    for arm in arms[1:]:
        print(f"{arm:<14}{statistics.median(step_ratio[arm]):>12.3f}{statistics.median(loss_ratio[arm]):>15.3f}")
    worst = max(statistics.median(step_ratio[a]) for a in arms[1:])
    print(f"target: step ratio <= 1.03 -> {'met' if worst <= 1.03 else 'NOT met'} (worst arm {worst:.3f})")


if __name__ == "__main__":
    main()
