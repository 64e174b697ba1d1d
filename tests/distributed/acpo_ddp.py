"""2-process CPU runs of RLVRGRPOTrainer with ACPO (launched by tests/test_acpo_distributed.py through torchrun, gloo).

For each `adaptive_clip_scope` ("global", with the off-policy diagnostics on, and "micro_batch"), every call of the trainer's ACPO binning is recorded on each
rank (its own tokens' probabilities, ratios and mask, and the per-bin and per-token bounds it used), then saved to
<out_dir>/<scope>_rank<k>.pt with the logged metrics and a checksum of the parameters.
"""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from rank_result import save_rank_result

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer


def run(model_path: str, out_dir: str, scope: str) -> None:
    # low temperature + lr 0.01: the tiny model's probabilities spread over the bins and ACPO's bound binds
    kwargs = grpo_kwargs(
        os.path.join(out_dir, scope), per_device_train_batch_size=4, temperature=0.05, learning_rate=0.01
    )
    # the global run also logs the off-policy diagnostics (gathered over both ranks)
    args = RLVRGRPOConfig(
        **kwargs, adaptive_clip="acpo", adaptive_clip_scope=scope, off_policy_diagnostics=scope == "global"
    )
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    clip = trainer.method("clip_objective")
    calls, acpo_bins = [], clip.acpo_bins

    def recording_acpo_bins(per_token_logps, ratio, mask):
        bins = acpo_bins(per_token_logps, ratio, mask)
        calls.append(
            {
                "probs": torch.exp(per_token_logps.detach()),
                "ratio": ratio.detach().clone(),
                "mask": mask.detach().clone(),
                "bin_bound": bins.bin_bound,
                "bound": bins.bound,
            }
        )
        return bins

    clip_objective_loss = trainer._clip_objective_loss

    def recording_clip_objective_loss(ratio, advantages, per_token_logps, mask, *rest):
        result = clip_objective_loss(ratio, advantages, per_token_logps, mask, *rest)
        calls[-1]["select"] = (mask.bool() & (advantages != 0)).detach().clone()  # the diagnostics' tokens
        return result

    clip.acpo_bins = recording_acpo_bins
    trainer._clip_objective_loss = recording_clip_objective_loss
    trainer.train()
    save_rank_result(trainer, out_dir, f"{scope}_rank", calls=calls)


if __name__ == "__main__":
    for scope in ("global", "micro_batch"):
        run(sys.argv[1], sys.argv[2], scope)
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
