"""2-process CPU run of RLVRGRPOTrainer whose reward meets only pathological completions, on every rank (launched by
tests/test_rewards_timeout.py through torchrun, gloo): bounded reward time under DDP, and the metric gathered.

Writes, per rank, the logged `rewards/*` metrics and the run's wall time to <out_dir>/rank<k>.json.
"""

import json
import os
import sys
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from grpo_helpers import grpo_kwargs, prompt_dataset

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.rewards.math import math_accuracy_reward


def towers(completions, reward_timeout, log_metric, **kwargs):
    """math_accuracy on a power tower in place of every completion: each one times out."""
    texts = ["\\boxed{9^{9^{9^{9^{9}}}}}"] * len(completions)
    return math_accuracy_reward(texts, answer=["3"] * len(texts), reward_timeout=reward_timeout, log_metric=log_metric)


def main(model_path: str, out_dir: str) -> None:
    args = RLVRGRPOConfig(
        **grpo_kwargs(
            os.path.join(out_dir, "run"),
            per_device_train_batch_size=4,
            num_iterations=1,
            max_steps=2,
            reward_timeout=1.0,
        )
    )
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=towers, args=args, train_dataset=prompt_dataset())
    start = time.monotonic()
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    result = {
        "world_size": trainer.accelerator.num_processes,
        "seconds": time.monotonic() - start,
        "timeouts": [log["rewards/timeouts"] for log in logs],
        "reward_mean": [log["rewards/towers/mean"] for log in logs],
    }
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
