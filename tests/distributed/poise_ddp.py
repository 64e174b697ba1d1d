"""2-process CPU run of RLVRGRPOTrainer with POISE (launched by tests/test_poise_distributed.py through torchrun,
gloo).

Each rank records its own features and its slice of the advantages per generation batch, then saves them with its
POISE state (buffer, probe, counters), its logged metrics and a checksum of the parameters to <out_dir>/rank<k>.pt; a
checkpoint at step 3 holds each rank's state file.
"""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from grpo_helpers import digit_reward, prompt_dataset, small_grpo_kwargs
from rank_result import save_rank_result

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer


def run(model_path: str, out_dir: str) -> None:
    kwargs = small_grpo_kwargs(
        os.path.join(out_dir, "run"),
        per_device_train_batch_size=4,
        max_steps=4,
        save_strategy="steps",
        save_steps=3,
        value_baseline="poise",
        scale_rewards="none",
        poise_bootstrap_steps=2,
        poise_warmup_steps=1,
        poise_prompt_pca=4,
        poise_response_pca=4,
        poise_pool_n=4,
    )
    trainer = RLVRGRPOTrainer(
        model=model_path, reward_funcs=digit_reward, args=RLVRGRPOConfig(**kwargs), train_dataset=prompt_dataset()
    )
    features, advantages = [], []
    poise = trainer.method("poise")
    features_fn, replace_fn = poise.features, poise.replace_advantages

    def recording_features(output):
        local = features_fn(output)
        features.append(local.clone())
        return local

    def recording_replace(output):
        replace_fn(output)
        advantages.append(output["advantages"].detach().cpu().clone())

    poise.features = recording_features
    poise.replace_advantages = recording_replace
    trainer.train()
    save_rank_result(trainer, out_dir, features=features, advantages=advantages, state=poise.baseline.state_dict())


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
