"""2-process CPU GRPO run with BoundaryProbeCallback (launched by tests/test_boundary.py through torchrun, gloo).

Writes, per rank, the callback's history and the probe log-likelihoods it gathered, next to the same log-likelihoods
computed by this rank alone on the whole probe set, to <out_dir>/rank<k>.json.
"""

import json
import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.evaluation.boundary import BoundaryProbeCallback, sequence_logps


NUM_PROBES = 15  # odd: the shards are uneven and one rank pads


def main(model_path: str, out_dir: str) -> None:
    # float32: the check is that the gathered shards equal one process scoring every probe (atol 1e-5); under TRL's
    # default bf16 autocast a CPU without native bf16 sums a shard's matmuls in another order than the whole batch's
    # (6.8e-3 apart there), which is the kernel, not the sharding
    kwargs = grpo_kwargs(os.path.join(out_dir, "run"), per_device_train_batch_size=4, max_steps=3)
    args = RLVRGRPOConfig(**kwargs, bf16=False)
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    probes = [{"prompt": f"{i}+{i}=", "completion": str(2 * i)} for i in range(NUM_PROBES)]
    callback = BoundaryProbeCallback(probes, trainer=trainer, eval_steps=1, batch_size=4)
    trainer.add_callback(callback)
    trainer.train()
    tokenizer = trainer.processing_class
    alone = sequence_logps(
        trainer.accelerator.unwrap_model(trainer.model_wrapped),
        tokenizer.pad_token_id,
        callback.prompt_ids,
        callback.completion_ids,
        batch_size=64,
    )
    logged = [{k: v for k, v in log.items() if k.startswith("boundary/")} for log in trainer.state.log_history]
    result = {
        "world_size": trainer.accelerator.num_processes,
        "history": callback.history,
        "last_logps": callback.last_logps.tolist(),
        "base_logps": callback.base_logps.tolist(),
        "alone": alone,
        "logged": [log for log in logged if log],
    }
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
