"""2-process CPU run of RLVRGRPOTrainer with online curation (launched by tests/test_curation_distributed.py).

Per rank, writes <out_dir>/<mode>_rank<k>.json with: the prompt rows of every generation batch this rank drew (its
local shard and the gathered global batch), the final curation state and sampler state, the logged curation
metrics, Pass@k callback values, and a checksum of the parameters.
"""

import json
import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from accelerate.utils import gather_object
from datasets import Dataset

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.evaluation import PassAtKCallback


def parity_reward(completions, curation_row, **kwargs):
    """Verifiable and deterministic per (prompt, completion): greedy answers are right on some prompts only."""
    return [float((row + sum(map(ord, c))) % 2 == 0) for row, c in zip(curation_row, completions)]


def eval_reward(completions, **kwargs):
    return [float(len(c) % 2 == 0) for c in completions]


def main(model_path: str, out_dir: str, mode: str) -> None:
    data = Dataset.from_dict({"prompt": [f"{i}*{i + 3}=" for i in range(12)]})
    args = RLVRGRPOConfig(
        output_dir=os.path.join(out_dir, f"run_{mode}"),
        per_device_train_batch_size=6,  # 12 completions per step = 3 prompts x 4: one group straddles the ranks
        num_generations=4,
        max_completion_length=6,
        learning_rate=1e-2,
        max_steps=6,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        gradient_checkpointing=False,
        seed=0,
        curation=mode,
        curation_self_recheck_steps=3,
    )
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=parity_reward, args=args, train_dataset=data)
    evaluation = Dataset.from_dict({"prompt": [f"{i}-1=" for i in range(5)]})
    callback = PassAtKCallback(evaluation, eval_reward, trainer=trainer, eval_steps=3, num_samples=4, max_new_tokens=5)
    trainer.add_callback(callback)
    local, global_ = [], []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        rows = [x["curation_row"] for x in inputs]
        local.append(rows)
        global_.append(gather_object(rows))
        return original(inputs)

    trainer._generate_and_score_completions = spy
    trainer.train()
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    logs = [log for log in trainer.state.log_history if "loss" in log]
    result = {
        "world_size": trainer.accelerator.num_processes,
        "local_rows": local,
        "global_rows": global_,
        "state": trainer.method("curation").curation_state.state_dict(),
        "sampler": trainer.method("curation").training_sampler.state_dict(),
        "metrics": [{k: v for k, v in log.items() if k.startswith("curation/")} for log in logs],
        "pass_at_k": [metrics for _, metrics in callback.history],
        "param_sum": params.double().sum().item(),
    }
    with open(os.path.join(out_dir, f"{mode}_rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
