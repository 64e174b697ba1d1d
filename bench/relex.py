"""Per-step cost of RELEX's trajectory recorder (`relex_record_steps`) against stock TRL GRPO, in one process.

    python bench/relex.py [--rounds 7] [--steps 12] [--every 1] [--hidden 64] [--layers 4]
    python bench/relex.py --quick        # make bench-quick's run (bench/quick.py)

Stock `trl.GRPOTrainer` and `RLVRGRPOTrainer(relex_record_steps=every)` are alternated arm by arm for ``--rounds``
rounds of ``--steps`` optimizer steps on a random tiny Qwen2 model (CPU, float32). Per round, the mean step time
after the first two steps; printed: the median of the per-round ratios recorder / stock, and the recorder's own mean
``relex/record_seconds`` (what a recording holds the training step: the gather and θ_s − θ_0 computed into a float16
buffer) and ``relex/write_seconds`` (that buffer written to disk by the recorder's writer thread, off the step), every
``every`` steps. Whole steps are timed (the writer thread's share of the CPU included), and a step of the tiny model
varies by ±10 % from round to round on a shared machine (3 rounds of 6 steps read 0.76-1.16 per round), so the
defaults take 7 rounds of 12 steps and ``--quick`` 5 rounds of 10.
"""

import argparse
import os
import statistics
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.toy import save_tiny_model


try:  # run as a script (bench/ on sys.path) or imported as bench.relex
    from quick import quick_defaults, report
except ImportError:
    from bench.quick import quick_defaults, report


SKIP_STEPS = 2
RECORDER_METRICS = ("relex/record_seconds", "relex/write_seconds")


class _StepTimes(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def _reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def _run(arm, model_path, out, steps, every):
    kwargs = {
        "output_dir": out,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
        "max_steps": steps,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "seed": 0,
        "disable_tqdm": True,
    }
    dataset = Dataset.from_dict({"prompt": [f"{i}+{2 * i}=" for i in range(64)]})
    if arm == "stock":
        trainer = GRPOTrainer(model=model_path, reward_funcs=_reward, args=GRPOConfig(**kwargs), train_dataset=dataset)
    else:
        args = RLVRGRPOConfig(**kwargs, relex_record_steps=every)
        trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=_reward, args=args, train_dataset=dataset)
    trainer.remove_callback(PrinterCallback)  # the logs are read from the state, not printed
    timer = _StepTimes()
    trainer.add_callback(timer)  # after the recorder: its on_step_end time is inside the step
    trainer.train()
    logs = trainer.state.log_history
    record = {key: [log[key] for log in logs if key in log] for key in RECORDER_METRICS}
    return statistics.mean(timer.times[SKIP_STEPS:]), record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    quick_defaults(parser, None, rounds=5, steps=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_path = save_tiny_model(
            os.path.join(tmp, "model"), hidden_size=args.hidden, num_hidden_layers=args.layers
        )
        ratios, records = [], {key: [] for key in RECORDER_METRICS}
        for r in range(args.rounds):
            stock, _ = _run("stock", model_path, os.path.join(tmp, f"stock{r}"), args.steps, args.every)
            ours, record = _run("relex", model_path, os.path.join(tmp, f"relex{r}"), args.steps, args.every)
            ratios.append(ours / stock)
            for key, values in record.items():
                records[key] += values
            print(
                f"round {r}: stock {stock * 1e3:.1f} ms/step, recorder {ours * 1e3:.1f} ms/step, ratio {ours / stock:.3f}"
            )
    print(f"median step-time ratio recorder/stock (every={args.every}): {statistics.median(ratios):.3f}")
    for key, values in records.items():
        print(f"mean {key}: {statistics.mean(values) * 1e3:.1f} ms")
    if args.quick:
        report("relex", statistics.median(ratios))


if __name__ == "__main__":
    main()
