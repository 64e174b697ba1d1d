"""2-process CPU run of RLVRGRPOTrainer with RSI-S's quantile selection (launched by tests/test_rsi_distributed.py
through torchrun, gloo).

Every call of the trainer's RSI-S mask is recorded on each rank (its own tokens' RSI, mask and keep mask, and the
quantile bounds it used), then saved to <out_dir>/rank<k>.pt with the logged metrics and a checksum of the parameters.
"""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from rank_result import save_rank_result

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.grpo.methods import rsi as rsi_selection
from trl_rlvr_ext.losses import relative_surprisal_index


def run(model_path: str, out_dir: str) -> None:
    kwargs = grpo_kwargs(os.path.join(out_dir, "run"), per_device_train_batch_size=4)
    args = RLVRGRPOConfig(**kwargs, rsi_selection="quantile", rsi_quantile_low=0.2, rsi_quantile_high=0.8)
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    calls, mask_fn, bounds_fn = [], trainer._rsi_selection_mask, rsi_selection.rsi_quantile_bounds

    def recording_bounds(pool, q_low, q_high):
        low, high = bounds_fn(pool, q_low, q_high)
        calls.append({"low": low.item(), "high": high.item()})
        return low, high

    def recording_mask(per_token_logps, entropies, mask, entropy_mask, inputs):
        keep = mask_fn(per_token_logps, entropies, mask, entropy_mask, inputs)
        calls[-1].update(
            rsi=relative_surprisal_index(per_token_logps, entropies, mask),
            mask=mask.detach().clone(),
            keep=keep.detach().clone(),
        )
        return keep

    rsi_selection.rsi_quantile_bounds = recording_bounds
    trainer._rsi_selection_mask = recording_mask
    trainer.train()
    save_rank_result(trainer, out_dir, calls=calls)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
