"""2-process CPU run of RLVRGRPOTrainer with dynamic sampling (launched by tests/test_distributed.py).

Per rank, writes <out_dir>/ds_<curation>_rank<k>.json with: the error of a configuration whose groups straddle the
ranks, the prompts of every batch this rank trained on (local and gathered), the selector's kept groups per batch,
the extra-prompt stream's final state, the logged dynamic_sampling metrics, and a checksum of the parameters.
"""

import json
import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from accelerate.utils import gather_object
from datasets import Dataset

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer


def half_constant_reward(prompts, completions, **kwargs):
    """Odd prompts: constant (zero-variance groups); even prompts: spread between distinct completions."""
    return [
        0.5 if int(p.split("+")[0]) % 2 else sum(map(ord, c)) % 997 / 997 + 0.001 * len(c)
        for p, c in zip(prompts, completions)
    ]


def config(out_dir, curation, **overrides):
    kwargs = {
        "output_dir": os.path.join(out_dir, f"run_{curation}"),
        "per_device_train_batch_size": 4,  # 8 completions per step = 4 groups of 2: 2 whole groups per rank
        "num_generations": 2,
        "max_completion_length": 6,
        "learning_rate": 1e-2,
        "max_steps": 3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "gradient_checkpointing": False,
        "seed": 0,
        "curation": curation,
        "dynamic_sampling": True,
    }
    kwargs.update(overrides)
    return RLVRGRPOConfig(**kwargs)


def main(model_path: str, out_dir: str, curation: str) -> None:
    data = Dataset.from_dict({"prompt": [f"{i}+{2 * i}=" for i in range(12)]})
    straddle_error = None
    try:  # 3 completions per rank with groups of 2: a group would straddle the ranks
        RLVRGRPOTrainer(
            model=model_path,
            reward_funcs=half_constant_reward,
            args=config(out_dir, curation, per_device_train_batch_size=3),
            train_dataset=data,
        )
    except ValueError as error:
        straddle_error = str(error)

    trainer = RLVRGRPOTrainer(
        model=model_path, reward_funcs=half_constant_reward, args=config(out_dir, curation), train_dataset=data
    )
    tok = trainer.processing_class
    local, global_, kept = [], [], []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        prompts = [tok.decode(i[m.bool()]) for i, m in zip(out["prompt_ids"], out["prompt_mask"])]
        local.append(prompts)
        global_.append(gather_object(prompts))
        kept.append([list(map(list, k)) for k in trainer.method("dynamic_sampling").selector.kept])
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    logs = [log for log in trainer.state.log_history if "loss" in log]
    result = {
        "world_size": trainer.accelerator.num_processes,
        "straddle_error": straddle_error,
        "local_prompts": local,
        "global_prompts": global_,
        "kept": kept,
        "stream": trainer.method("dynamic_sampling").stream.state_dict(),
        "metrics": [{k: v for k, v in log.items() if k.startswith("dynamic_sampling/")} for log in logs],
        "param_sum": params.double().sum().item(),
    }
    with open(os.path.join(out_dir, f"ds_{curation}_rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
