"""Per-step cost of IS-DPO against stock TRL DPO, side by side in one process.

    python bench/dpo_overhead.py [--rounds 5] [--steps 40] [--batch 16] [--hidden 64] [--layers 4] [--behavior]
    python bench/dpo_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --prompt-chars 400 --behavior  # GPU
    python bench/dpo_overhead.py --quick      # make bench-quick's run (bench/quick.py): 2 rounds x 10 steps

Builds stock `trl.DPOTrainer` and `ISDPOTrainer` (importance_sampling=True, behaviour policy = the reference; with
`--behavior` also an arm whose behaviour log-probs come from dataset columns) on the same model, data and seed. Each
round interleaves the arms step by step (stock, IS, IS, stock, ...) on the same batch, so that the load of a shared
machine hits every arm alike; a step is TRL's full `training_step` (forward of policy and reference, loss, metrics,
backward) plus the optimizer step. Reports per arm the median step time and the median of the per-round ratios of
median step times against stock. Target: step ratio <= 1.02. IS-DAA adds no forward pass: a few element-wise ops on
(batch,) tensors and one gather for the `is/*` metrics. On CUDA the timer synchronizes the device first.
``--prompt-chars N`` pads each toy prompt with N characters of filler text (byte tokenizer: N tokens), for sequence
lengths closer to real preference data; the default (0) keeps the toy prompts.
"""

import argparse
import os
import statistics
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets
import torch
import transformers
from trl import DPOConfig, DPOTrainer

from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer
from trl_rlvr_ext.dpo.behavior import BEHAVIOR_COLUMNS
from trl_rlvr_ext.toy import save_tiny_model
from trl_rlvr_ext.toy.preference import make_toy_preference_dataset


try:  # run as a script (bench/ on sys.path) or imported as bench.dpo_overhead
    from model_shapes import SHAPES, save_shaped_model
    from quick import quick_defaults
except ImportError:
    from bench.model_shapes import SHAPES, save_shaped_model
    from bench.quick import quick_defaults

FILLER = "Answer the question below with a single number, and nothing else. "


def synchronize():
    """Wait for queued CUDA kernels, so that a wall-clock timer measures them (a no-op without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def build(
    arm: str,
    model_path: str,
    batch: int,
    out_dir: str,
    device: str = "cpu",
    bf16: bool = False,
    prompt_chars: int = 0,
    model_dtype: str | None = None,
):
    """One trainer and one batch; ``prompt_chars`` of filler text go before each prompt (0: the toy prompts);
    ``model_dtype`` (e.g. ``"bfloat16"``) is the dtype policy and reference load in (None: TRL's default, float32)."""
    common = {
        "output_dir": out_dir,
        "per_device_train_batch_size": batch,
        "max_length": 32 + prompt_chars,
        "learning_rate": 1e-5,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": device == "cpu",
        "bf16": bf16,
        "activation_checkpointing": False,
        "seed": 0,
        "disable_tqdm": True,
    }
    if model_dtype is not None:
        common["model_init_kwargs"] = {"dtype": model_dtype}
    dataset = make_toy_preference_dataset(batch, seed=0)
    if prompt_chars:
        filler = (FILLER * (prompt_chars // len(FILLER) + 1))[:prompt_chars]
        dataset = dataset.map(lambda row: {"prompt": filler + row["prompt"]})
    if arm == "stock":
        trainer = DPOTrainer(model=model_path, args=DPOConfig(**common), train_dataset=dataset)
    else:
        if arm == "is_dpo_behavior":
            dataset = dataset.add_column(BEHAVIOR_COLUMNS[0], [-20.0] * len(dataset))
            dataset = dataset.add_column(BEHAVIOR_COLUMNS[1], [-21.0] * len(dataset))
        trainer = ISDPOTrainer(model=model_path, args=ISDPOConfig(**common), train_dataset=dataset)
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by `train()` in Trainer; we drive the steps ourselves
    inputs = next(iter(trainer.get_train_dataloader()))
    return trainer, inputs


def step(trainer, inputs) -> float:
    synchronize()
    start = time.perf_counter()
    trainer.training_step(trainer.model, inputs)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad()
    synchronize()
    return time.perf_counter() - start


IS_DPO_WORK = ("_split_behavior_logps", "_is_daa_weights", "_is_daa_weight_loss", "_log_importance_weights")


def own_work(trainer, inputs, steps: int) -> dict[str, float]:
    """IS-DPO's own work inside ``steps`` training steps of an `ISDPOTrainer`, timed directly: the seconds spent in
    the four calls of the marked blocks of the copy of TRL's `_compute_loss` (`IS_DPO_WORK`: the behaviour fields split
    off, the weights from the step's log-probs, the weighted per-pair loss, the `is/*` metrics), per step (median), with
    the median step; a load-robust figure where interleaved step ratios swing by several per cent."""
    spent = [0.0]
    originals = {name: getattr(trainer, name) for name in IS_DPO_WORK}

    def timed(call):
        def wrapper(*args, **kwargs):
            synchronize()
            start = time.perf_counter()
            out = call(*args, **kwargs)
            synchronize()
            spent[0] += time.perf_counter() - start
            return out

        return wrapper

    work, steps_seconds = [], []
    for name, call in originals.items():
        setattr(trainer, name, timed(call))
    try:
        for _ in range(steps):
            spent[0] = 0.0
            steps_seconds.append(step(trainer, inputs))
            work.append(spent[0])
    finally:
        for name in IS_DPO_WORK:
            delattr(trainer, name)
    return {"own_work": statistics.median(work), "step": statistics.median(steps_seconds)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="Steps per arm and round.")
    parser.add_argument("--batch", type=int, default=16, help="Preference pairs per step.")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--behavior", action="store_true", help="Also time IS-DPO with behaviour log-prob columns.")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--dtype", choices=["float32", "bf16"], default="float32", help="bf16: bf16 weights and bf16=True"
    )
    parser.add_argument("--shape", choices=["tiny", *SHAPES], default="tiny", help="tiny: --hidden x --layers")
    parser.add_argument("--prompt-chars", type=int, default=0, help="filler characters before each toy prompt")
    quick_defaults(parser, None, rounds=2, steps=10, behavior=True)
    cli = parser.parse_args()
    if cli.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here.")
    options = {
        "device": cli.device,
        "bf16": cli.dtype == "bf16",
        "model_dtype": "bfloat16" if cli.dtype == "bf16" else None,
        "prompt_chars": cli.prompt_chars,
    }
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    arms = ["stock", "is_dpo", *(["is_dpo_behavior"] if cli.behavior else [])]
    medians = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        if cli.shape == "tiny":
            model_path = save_tiny_model(
                os.path.join(tmp, "model"),
                hidden_size=cli.hidden,
                num_hidden_layers=cli.layers,
                intermediate_size=4 * cli.hidden,
            )
        else:
            model_path = save_shaped_model(os.path.join(tmp, "model"), cli.shape, cli.dtype, device=cli.device)
        built = {arm: build(arm, model_path, cli.batch, os.path.join(tmp, arm), **options) for arm in arms}
        for arm in arms:  # warm-up: allocator, thread pools
            for _ in range(3):
                step(*built[arm])
        for round_index in range(cli.rounds):
            times = {arm: [] for arm in arms}
            for step_index in range(cli.steps):
                order = arms if step_index % 2 == 0 else arms[::-1]  # alternate which arm goes first
                for arm in order:
                    times[arm].append(step(*built[arm]))
            for arm in arms:
                medians[arm].append(statistics.median(times[arm]))
            print(
                f"round {round_index + 1}/{cli.rounds}: "
                + ", ".join(f"{arm} {1e3 * medians[arm][-1]:.2f} ms/step" for arm in arms),
                flush=True,
            )

    print(f"\nIS-DPO vs stock DPO ({cli.rounds} rounds x {cli.steps} interleaved steps, batch {cli.batch} pairs)")
    print(f"{'arm':<18}{'step ms (median)':>18}{'step ratio':>12}")
    for arm in arms:
        ratio = statistics.median(a / s for a, s in zip(medians[arm], medians["stock"], strict=True))
        print(f"{arm:<18}{1e3 * statistics.median(medians[arm]):>18.2f}{ratio:>12.3f}")
    print("target: step ratio <= 1.02")


if __name__ == "__main__":
    main()
