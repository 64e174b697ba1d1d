"""2-process CPU check of SELF's kept-only normaliser for a sequence-averaged loss (launched by
tests/test_curation_distributed.py).

One generation batch, one optimizer window of two micro-batches per rank, loss_type="grpo". The ranks keep 4/0 and 2/4
rows in their two micro-batches, so rank 1 pads its first micro-batch and rank 0 its second (every row padding). The
trainer's micro-batch losses are backpropagated on each rank and the gradients averaged over the ranks, as DDP does.
The reference is TRL's own `_compute_loss` on one batch made of the 10 kept rows of both ranks. Writes
<out_dir>/normaliser_rank<k>.json with the largest gradient difference and the gradient scale.
"""

import json
import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.distributed as dist
import trl.trainer.grpo_trainer as grpo_module
from accelerate.utils import gather_object
from datasets import Dataset
from trl import GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer


SOLVED = {2, 3, 5}  # rank 0 holds prompts 0-3, rank 1 prompts 4-7; micro-batches of two prompts each


def length_reward(completions, curation_row, **kwargs):
    return [row + sum(map(ord, c)) % 7 / 10 for c, row in zip(completions, curation_row)]


def main(model_path: str, out_dir: str) -> None:
    # Prompts of equal token length: rows from both ranks can share one batch without re-padding the prompts.
    data = Dataset.from_dict({"prompt": [f"{i:02d}+{i:02d}=" for i in range(8)]})
    args = RLVRGRPOConfig(
        output_dir=os.path.join(out_dir, "run"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
        num_generations=2,
        max_completion_length=6,
        loss_type="grpo",
        curation="self",
        report_to="none",
        use_cpu=True,
        gradient_checkpointing=False,
        seed=0,
    )
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=length_reward, args=args, train_dataset=data)
    trainer.method("curation").grade = lambda examples, completion_ids: [e["curation_row"] in SOLVED for e in examples]
    grpo_module.shuffle_sequence_dict = lambda batch: batch  # micro-batch m = prompts 2m, 2m+1 of this rank
    trainer.model.double()  # float64: the two computations batch rows differently
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    first = 4 * rank
    inputs = [dict(trainer.train_dataset[r]) for r in range(first, first + 4) for _ in range(2)]
    micro = []
    for step in range(2):
        trainer._step = step
        micro.append(trainer._prepare_inputs(inputs))
    kept_counts = [int(m["curation_keep"].sum()) for m in micro]

    params = [p for p in trainer.model.parameters() if p.requires_grad]
    loss = sum(trainer.compute_loss(trainer.model, m) for m in micro)
    grads = torch.autograd.grad(loss, params)
    for g in grads:  # what DDP does with the gradients of the window
        dist.all_reduce(g, op=dist.ReduceOp.SUM)
        g /= world

    # The reference: the kept rows of both ranks as one batch (completions right-padded to a common width)
    keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")
    local = [{k: m[k][m["curation_keep"]].cpu() for k in keys} for m in micro]
    pieces = gather_object(local)
    width = max(p["completion_ids"].size(1) for p in pieces)

    def pad(t):
        return torch.nn.functional.pad(t, (0, width - t.size(1)), value=0) if t.dim() == 2 else t

    kept = {k: torch.cat([pad(p[k]) if k.startswith("completion") else p[k] for p in pieces]) for k in keys}
    kept["num_items_in_batch"] = kept["completion_mask"].sum()
    trainer.current_gradient_accumulation_steps = 1
    reference = torch.autograd.grad(GRPOTrainer._compute_loss(trainer, trainer.model, kept), params)
    result = {
        "world_size": world,
        "kept_counts": kept_counts,
        "num_kept": int(kept["advantages"].numel()),
        "max_diff": max(float((a - b).abs().max()) for a, b in zip(grads, reference)),
        "scale": max(float(b.abs().max()) for b in reference),
    }
    with open(os.path.join(out_dir, f"normaliser_rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    from clean_exit import exit_cleanly  # the script's folder is on sys.path

    exit_cleanly()  # gloo may abort at interpreter exit after the work is done (clean_exit.py)
