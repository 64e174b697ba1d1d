"""2-process CPU run of GRPO training with `PassAtKCallback` (launched by tests/test_pass_at_k_distributed.py).

Per rank, writes <out_dir>/rank<k>.json with: the problems this rank sampled and the counts / answer classes it found
for them (before the gather), the gathered counts and answer classes of every evaluation, and the logged metrics.
"""

import json
import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext.evaluation import PassAtKCallback


def even_length_reward(completions, **kwargs):
    return [float(len(c) % 2 == 0) for c in completions]


def length_class(text):
    """A stand-in answer: the length modulo 3; an empty completion gives no answer (it abstains)."""
    return None if not text else str(len(text) % 3)


def main(model_path: str, out_dir: str) -> None:
    args = GRPOConfig(
        output_dir=os.path.join(out_dir, "run"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        learning_rate=1e-2,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        gradient_checkpointing=False,
        seed=0,
    )
    train = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(8)]})
    trainer = GRPOTrainer(model=model_path, reward_funcs=even_length_reward, args=args, train_dataset=train)
    # 5 problems over 2 ranks: rank 0 holds 3, rank 1 holds 2 and pads its shard with a repeat
    evaluation = Dataset.from_dict({"prompt": [f"{i}-1=" for i in range(5)]})
    callback = PassAtKCallback(
        evaluation,
        even_length_reward,
        trainer=trainer,
        eval_steps=1,
        num_samples=4,
        max_new_tokens=5,
        answer_extractor=length_class,
        bootstrap_resamples=200,
    )
    trainer.add_callback(callback)
    local, gathered = [], []
    count = callback._count

    def spy(backend, rows, max_new_tokens, rank):
        counts, classes = count(backend, rows, max_new_tokens, rank)
        local.append({"prompts": [row["prompt"] for row in rows], "counts": counts.tolist(), "classes": classes})
        return counts, classes

    callback._count = spy
    evaluate = callback.evaluate

    def record():
        metrics = evaluate()
        result = callback.last_result
        gathered.append({"counts": result.num_correct.tolist(), "classes": result.answer_classes})
        return metrics

    callback.evaluate = record
    trainer.train()
    result = {
        "world_size": trainer.accelerator.num_processes,
        "rank": trainer.accelerator.process_index,
        "local": local,
        "gathered": gathered,
        "history": callback.history,
        "logged": [{k: v for k, v in log.items() if k.startswith("eval/")} for log in trainer.state.log_history],
    }
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
