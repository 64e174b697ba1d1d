"""Step cost of DeepSpeed ZeRO-3 and FSDP2 against DDP for the same GRPO step, 2 CPU processes (gloo).

    python bench/sharding_cpu.py [--rounds 3] [--steps 8] [--hidden 64] [--layers 4] [--arm none|nsr]
    python bench/sharding_cpu.py --quick     # make bench-quick's run (bench/quick.py): 1 round of 3 steps

Each round launches, in turn, one 2-process run per mode with the package's accelerate configs
(``accelerate launch --config_file trl_rlvr_ext/recipes/accelerate_configs/<config> --num_processes 2
--mixed_precision no``, ``use_cpu=True``): DDP (multi_gpu.yaml), ZeRO-3 (deepspeed_zero3.yaml), FSDP2 (fsdp2.yaml).
Every run trains `RLVRGRPOTrainer` on the same model, data and seed for ``--steps`` steps; rank 0 times each step
(first step dropped: warm-up) and reports the median. The ratio of a round is the mode's median over DDP's median in
that round; the result is the median of the per-round ratios (alternating the order cancels machine-load drift).

FSDP2 on CPU needs the test-harness relabel of docs/design/CPU_STACK.md section 4 (accelerate otherwise silently runs
DDP, which the trainers refuse); this benchmark applies it. The first DeepSpeed run JIT-builds ``deepspeed_shm_comm``
into ``TORCH_EXTENSIONS_DIR`` (default here ``~/.cache/trl_rlvr_ext/torch_extensions``).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# The 2-process launch with the package's accelerate configs, as the method authors' kit and the tests launch it
from trl_rlvr_ext.testing.sharded import accelerate_command  # noqa: E402


try:  # run as a script (bench/ on sys.path) or imported as bench.sharding_cpu
    from quick import quick_defaults
except ImportError:
    from bench.quick import quick_defaults


MODES = {"ddp": "multi_gpu.yaml", "zero3": "deepspeed_zero3.yaml", "fsdp2": "fsdp2.yaml"}


def reward(completions, **kwargs):
    return [sum(map(ord, c)) % 13 / 13 for c in completions]


def worker(mode: str, model_path: str, steps: int, arm: str, out: str) -> None:
    """One trainer under the launched mode; rank 0 writes its per-step times."""
    import torch
    from accelerate.utils import DistributedType
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback

    from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self._start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)

    args = RLVRGRPOConfig(
        output_dir=os.path.join(os.path.dirname(out), f"run_{mode}"),
        per_device_train_batch_size=16,  # 32 completions per step, 4 groups of 8
        num_generations=8,
        max_completion_length=16,
        num_iterations=2,
        learning_rate=1e-3,
        max_steps=steps,
        logging_steps=steps,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        seed=0,
        epsilon_high=0.28,
        disable_tqdm=True,
        clip_recovery=arm,
    )
    if mode == "fsdp2":  # the harness relabel (module docstring)
        args.distributed_state.distributed_type = DistributedType.MULTI_GPU
    dataset = Dataset.from_dict({"prompt": [f"{i}+{3 * i}=" for i in range(256)]})
    timer = StepTimer()
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(timer)
    trainer.train()
    if trainer.accelerator.is_main_process:
        kind = type(trainer.model_wrapped).__name__
        with open(out, "w") as f:
            json.dump({"times": timer.times, "wrapped": kind, "threads": torch.get_num_threads()}, f)
    sys.stdout.flush()
    os._exit(0)  # CPU_STACK 5: gloo DDP sometimes crashes at interpreter exit


def launch(mode: str, model_path: str, steps: int, arm: str, out: str) -> dict:
    cmd, env = accelerate_command(MODES[mode], __file__, "--worker", mode, model_path, str(steps), arm, out)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if not os.path.exists(out):
        raise RuntimeError(
            f"{mode} run failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    with open(out) as f:
        return json.load(f)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, model_path, steps, arm, out = sys.argv[2:7]
        return worker(mode, model_path, int(steps), arm, out)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=64, help="tiny model's hidden size")
    parser.add_argument("--layers", type=int, default=4, help="tiny model's layers")
    parser.add_argument("--arm", choices=["none", "nsr"], default="none", help="clip_recovery of every run")
    quick_defaults(parser, None, rounds=1, steps=3)
    args = parser.parse_args()

    from trl_rlvr_ext.toy import save_tiny_model

    medians = {mode: [] for mode in MODES}
    ratios = {mode: [] for mode in MODES if mode != "ddp"}
    with tempfile.TemporaryDirectory() as tmp:
        model_path = save_tiny_model(
            os.path.join(tmp, "model"),
            hidden_size=args.hidden,
            intermediate_size=4 * args.hidden,
            num_hidden_layers=args.layers,
        )
        for r in range(args.rounds):
            order = list(MODES) if r % 2 == 0 else list(MODES)[::-1]
            round_medians = {}
            for mode in order:
                result = launch(mode, model_path, args.steps, args.arm, os.path.join(tmp, f"{mode}_{r}.json"))
                round_medians[mode] = statistics.median(result["times"][1:])  # first step: warm-up
                medians[mode].append(round_medians[mode])
            for mode, values in ratios.items():
                values.append(round_medians[mode] / round_medians["ddp"])
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(f"{m} {round_medians[m] * 1e3:.0f} ms" for m in MODES)
                + " | "
                + ", ".join(f"{m}/ddp x{ratios[m][-1]:.3f}" for m in ratios)
            )

    print(
        f"\nGRPO step, 2 CPU processes (gloo, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}), tiny Qwen2 "
        f"hidden {args.hidden} x {args.layers} layers, 32 completions x 16 tokens, clip_recovery={args.arm}, float32"
    )
    print(f"{'mode':<8}{'median step (ms)':>18}{'ratio to DDP':>15}")
    for mode in MODES:
        ratio = 1.0 if mode == "ddp" else statistics.median(ratios[mode])
        print(f"{mode:<8}{statistics.median(medians[mode]) * 1e3:>18.0f}{ratio:>15.3f}")
    print(f"(median over {args.rounds} alternated rounds of the per-round ratio; {args.steps - 1} timed steps a run)")


if __name__ == "__main__":
    main()
