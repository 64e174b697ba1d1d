"""2-process CPU run of RLVRGRPOTrainer with NSR (launched by tests/test_distributed.py through torchrun, gloo).

Writes, per rank, the logged losses / NSR metrics and a checksum of the parameters to <out_dir>/rank<k>.json.
"""

import json
import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer


def main(model_path: str, out_dir: str) -> None:
    args = RLVRGRPOConfig(
        **grpo_kwargs(os.path.join(out_dir, "run"), clip_recovery="nsr", per_device_train_batch_size=4)
    )
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    result = {
        "world_size": trainer.accelerator.num_processes,
        "loss": [log["loss"] for log in logs],
        "high_frac": [log["clip_recovery/high_frac"] for log in logs],
        "low_frac": [log["clip_recovery/low_frac"] for log in logs],
        "clip_region": [log["clip_ratio/region_mean"] for log in logs],
        "param_sum": params.double().sum().item(),
        "param_abs_sum": params.double().abs().sum().item(),
    }
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
