"""2-process CPU run of RLVRGRPOTrainer with objective="popo" (launched by tests/test_popo_distributed.py through
torchrun, gloo), 6 rollouts per process in groups of 4, so the middle group straddles the two processes.

Each rank saves to <out_dir>/rank<k>.pt: the gathered inputs of every weight computation and its own weights, its EMA
tensors and predictor state after training, the logged metrics and a checksum of the parameters.
"""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from rank_result import save_rank_result

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.grpo.methods import popo


def run(model_path: str, out_dir: str) -> None:
    kwargs = grpo_kwargs(
        os.path.join(out_dir, "run"), per_device_train_batch_size=6, num_iterations=1, max_steps=3, learning_rate=1e-2
    )
    args = RLVRGRPOConfig(**kwargs, objective="popo", popo_tau=0.9, popo_kl_monitor_steps=1)
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    method = trainer.method("popo")
    calls, weights_fn, local_fn = [], popo.popo_weights_from_means, method.weights

    def recording_weights(means, lengths, positive, group, **options):
        calls.append({"means": means.clone(), "lengths": lengths.clone(), "positive": positive.clone()})
        return weights_fn(means, lengths, positive, group, **options)

    def recording_local(output):
        weights, positive = local_fn(output)
        calls[-1].update(local_weights=weights.clone(), local_positive=positive.clone())
        return weights, positive

    popo.popo_weights_from_means = recording_weights
    method.weights = recording_local
    trainer.train()
    save_rank_result(
        trainer,
        out_dir,
        calls=calls,
        ema=[p.detach().clone() for p in trainer.method("popo").ema_params],
        predictor={n: t.clone() for n, t in trainer.method("popo").predictor.state_dict().items()},
    )


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
