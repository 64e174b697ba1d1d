"""LoRA with vLLM on a CPU: the adapter sync (``vllm_sync="adapter"``) against the merged sync, and the GRPO step.

    python bench/vllm_lora.py                 # sync time per step and the GRPO step, on SmolLM2-135M-Instruct
    python bench/vllm_lora.py --quick         # the sync times only (a few minutes); last line: bench adapter: ...

Needs the vLLM venv (``trl-rlvr-ext setup-vllm-cpu``); run from the main venv, it re-runs itself there (as
``bench/vllm_cpu.py``). The model is the real pretrained one (``--model``, default ``smollm2-135m-instruct``, 134.5 M
parameters, float32 in the trainer and in vLLM), with a LoRA adapter of rank ``--rank`` (default 16, alpha 32, every
linear layer of the decoder: 4.9 M adapter parameters).

- **Sync** (both modes): colocated vLLM, eager. Per arm (``merged``: TRL's way, the adapter merged and every weight
  reloaded into vLLM; ``adapter``: only the adapter's tensors, `trl_rlvr_ext.grpo.vllm_lora`), a trainer is built and
  its ``sync_weights`` called ``--syncs`` times after one untimed warm-up call (the adapter arm's first call also
  compares the base with the checkpoint, once per run); arms alternate over ``--rounds`` rounds. Printed: the median
  sync time per arm and their ratio (adapter / merged).
- **Step** (full mode): one GRPO run per arm and round, each in a process of its own (a process keeps every
  colocated engine it built), alternated (``generate``: transformers ``generate`` with the PEFT model;
  ``vllm_merged``, ``vllm_adapter``: colocated vLLM); the median optimizer step after the first (a step includes
  its weight sync and generation), and the median time ``sync_weights`` took inside the runs. Printed: the ratios
  ``generate`` / vLLM (> 1: vLLM faster).

The last line is ``bench adapter: ratio <x> (target <= <y>) ok|MISS``: x = median adapter sync / median merged sync.
The target (bench/targets.py's `adapter`, 0.25) is set so that the sync stops deciding the step: the merged sync
reloads 134.5 M parameters; the adapter is 3.6 % of them, and a quarter leaves room for vLLM's per-adapter bookkeeping.
"""

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks, as modules
from quick import report, summary_line
from targets import TARGETS
from vllm_cpu import _reexec_in_vllm_venv, reward, step_timer


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TARGET = TARGETS["adapter"].limit  # adapter sync / merged sync, medians (declared in bench/targets.py)
KV_CACHE = {"kv_cache_memory_bytes": 256 << 20}


def lora_config(rank: int):
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM")


def grpo_args(arm: str, out_dir: str, steps: int, batch: int, completion_length: int):
    from trl_rlvr_ext import RLVRGRPOConfig

    vllm = {}
    if arm != "generate":
        vllm = {
            "use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": 256,
            "vllm_engine_kwargs": {"enforce_eager": True, "dtype": "float32", **KV_CACHE},
            "vllm_sync": "adapter" if arm.endswith("adapter") else "merged",
        }  # fmt: skip
    return RLVRGRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=batch, num_generations=4,
        max_completion_length=completion_length, learning_rate=1e-4, max_steps=steps, logging_steps=steps,
        save_strategy="no", report_to="none", use_cpu=True, bf16=False, seed=0, disable_tqdm=True, **vllm,
    )  # fmt: skip


def build(arm, model_path, out_dir, rank, steps=1, batch=8, completion_length=32, callbacks=None):
    from datasets import Dataset
    from transformers import PrinterCallback

    from trl_rlvr_ext import RLVRGRPOTrainer

    args = grpo_args(arm, out_dir, steps, batch, completion_length)
    dataset = Dataset.from_dict({"prompt": [f"{i}+{3 * i}=" for i in range(256)]})
    trainer = RLVRGRPOTrainer(
        model_path, reward, args=args, train_dataset=dataset, peft_config=lora_config(rank), callbacks=callbacks
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def time_syncs(arm, model_path, out_dir, rank, syncs) -> list[float]:
    """``syncs`` timed calls of the trainer's vLLM weight sync (after one untimed call)."""
    trainer = build(arm, model_path, out_dir, rank)
    sync = trainer.vllm_generation.sync_weights
    expected = "CPUAdapterSync" if arm == "adapter" else "CPUWeightSync"
    assert type(sync).__name__ == expected, f"{arm}: the trainer runs {type(sync).__name__}, not {expected}"
    sync()
    times = []
    for _ in range(syncs):
        start = time.perf_counter()
        sync()
        times.append(time.perf_counter() - start)
    del trainer, sync
    gc.collect()
    return times


def run_steps(arm, model_path, out_dir, rank, steps, batch, completion_length) -> tuple[list[float], list[float]]:
    """One GRPO run: its step times after the first, and the times of its weight syncs."""
    timer = step_timer()
    trainer = build(arm, model_path, out_dir, rank, steps, batch, completion_length, callbacks=[timer])
    sync_times = []
    if arm != "generate":
        sync = trainer.vllm_generation.sync_weights

        def timed_sync():
            start = time.perf_counter()
            sync()
            sync_times.append(time.perf_counter() - start)

        trainer.vllm_generation.sync_weights = timed_sync
    trainer.train()
    del trainer
    gc.collect()
    return timer.times[1:], sync_times[1:]


def one_arm_process(arm, tmp, round_, args, syncs) -> dict:
    """One arm in a process of its own (a process keeps every colocated engine it built: memory); its JSON."""
    out = os.path.join(tmp, f"{arm}-{round_}.json")
    command = [sys.executable, __file__, "--one-arm", arm, "--out", out, "--model", args.model,
               "--rank", str(args.rank), "--steps", str(args.steps), "--batch", str(args.batch),
               "--completion-length", str(args.completion_length), "--syncs", str(syncs)]  # fmt: skip
    from trl_rlvr_ext.scripts.vllm_serve import free_port

    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}  # colocate's rendezvous
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
    return json.loads(Path(out).read_text())


def verdict(ratio: float) -> str:
    """The line `make bench-quick` prints for this benchmark."""
    return summary_line("adapter", ratio, TARGET)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="The sync times only: 2 rounds x 3 syncs per arm.")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=None, help="Alternated rounds (default 2).")
    parser.add_argument("--syncs", type=int, default=None, help="Timed syncs per arm and round (default 5; quick 3).")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per run (full mode).")
    parser.add_argument("--batch", type=int, default=8, help="Completions per step (4 per prompt).")
    parser.add_argument("--completion-length", type=int, default=32)
    parser.add_argument("--one-arm", default=None, help=argparse.SUPPRESS)  # a step run in its own process
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rounds = args.rounds or 2
    syncs = args.syncs or (3 if args.quick else 5)
    _reexec_in_vllm_venv(__file__)
    import vllm

    from trl_rlvr_ext.data import resolve_model_name_or_path

    model_path = resolve_model_name_or_path(args.model)
    sync_times = {"merged": [], "adapter": []}
    step_times = {"generate": [], "vllm_merged": [], "vllm_adapter": []}
    step_syncs = {"vllm_merged": [], "vllm_adapter": []}
    if args.one_arm:
        with tempfile.TemporaryDirectory() as tmp:
            if args.one_arm in sync_times:
                result = {"syncs": time_syncs(args.one_arm, model_path, tmp, args.rank, syncs)}
            else:
                steps, syncs_in_run = run_steps(args.one_arm, model_path, tmp, args.rank, args.steps, args.batch,
                                                args.completion_length)  # fmt: skip
                result = {"steps": steps, "syncs": syncs_in_run}
        Path(args.out).write_text(json.dumps(result))
        return 0
    print(f"vllm {vllm.__version__}, {args.model}, LoRA r={args.rank}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
          f"{rounds} rounds x {syncs} syncs" + ("" if args.quick else f", {args.steps} steps x {args.batch} x "
          f"{args.completion_length} tokens"), flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for arm in ("merged", "adapter") if r % 2 == 0 else ("adapter", "merged"):
                if args.quick:  # in this process (4 engines fit); the full run's arms each in a process of their own
                    times = time_syncs(arm, model_path, os.path.join(tmp, f"sync-{arm}-{r}"), args.rank, syncs)
                else:
                    times = one_arm_process(arm, tmp, r, args, syncs)["syncs"]
                sync_times[arm] += times
                print(f"round {r} sync {arm}: " + ", ".join(f"{t:.3f}" for t in times), flush=True)
            if args.quick:
                continue
            arms = list(step_times) if r % 2 == 0 else list(reversed(step_times))
            for arm in arms:
                result = one_arm_process(arm, tmp, r, args, syncs)
                steps, syncs_in_run = result["steps"], result["syncs"]
                step_times[arm] += steps
                if arm in step_syncs:
                    step_syncs[arm] += syncs_in_run
                print(f"round {r} step {arm}: " + ", ".join(f"{t:.3f}" for t in steps), flush=True)
    med = {arm: statistics.median(times) for arm, times in sync_times.items()}
    print(f"\nsync (median): merged {med['merged']:.3f} s, adapter {med['adapter']:.3f} s")
    if not args.quick:
        steps = {arm: statistics.median(times) for arm, times in step_times.items()}
        in_run = {arm: statistics.median(times) for arm, times in step_syncs.items() if times}
        for arm in ("vllm_merged", "vllm_adapter"):
            print(f"step: generate {steps['generate']:.3f} s, {arm} {steps[arm]:.3f} s: "
                  f"generate / vLLM {steps['generate'] / steps[arm]:.2f}x (its syncs in the run: "
                  f"{in_run.get(arm, float('nan')):.3f} s median)")  # fmt: skip
    ratio = med["adapter"] / med["merged"]
    if args.quick:
        report("adapter", ratio)  # the line bench/quick.py reads
    print(verdict(ratio))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
