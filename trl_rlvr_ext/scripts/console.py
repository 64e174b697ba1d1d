"""What a command-line training run prints: one short line per logging step, the full metrics in a file (the
dependencies' unactionable warnings are hidden by `trl_rlvr_ext.scripts.quiet`).

Only the command line does this. The library leaves transformers' console output and Python's warnings alone: a
script that builds `RLVRGRPOTrainer` itself sees exactly what it would see with TRL's trainer.
"""

import json
import math
import os

from transformers import PrinterCallback, ProgressCallback, TrainerCallback


# The values of the short line, in this order, when the step logged them
SHORT_LINE_KEYS = (
    ("loss", "loss"),
    ("reward", "reward"),
    ("reward_std", "reward_std"),
    ("frac_reward_zero_std", "zero-spread groups"),
    ("rewards/accuracies", "pref. acc."),
    ("rewards/margins", "margin"),
    ("clip_ratio/region_mean", "clipped"),
    ("clip_recovery/high_frac", "rescued high"),
    ("clip_recovery/low_frac", "rescued low"),
    ("curation/kept_prompts", "kept prompts"),
    ("is/weight_mean", "IS weight"),
    ("grad_norm", "grad norm"),
    ("learning_rate", "lr"),
)
LOG_FILE = "train_log.jsonl"


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e4) else f"{value:.4f}"
    return str(value)


def short_line(logs: dict, step: int, max_steps: int) -> str | None:
    """``step 10/200  loss 0.0123  reward 0.4500 ...``: the step's main values (None for a log with none of them)."""
    parts = [f"{label} {_format(logs[key])}" for key, label in SHORT_LINE_KEYS if key in logs]
    if not parts:
        return None
    return f"step {step}/{max_steps}  " + "  ".join(parts)


class _ConciseLog:
    """Prints `short_line` for each training log on the main process and appends every log, whole, as one JSON line
    to ``<output_dir>/train_log.jsonl``; the end-of-training summary prints whole."""

    def _setup_log(self, output_dir: str):
        self.path = os.path.join(output_dir, LOG_FILE)
        self._told = False

    def _write(self, line: str) -> None:
        bar = getattr(self, "training_bar", None)
        if bar is not None:
            bar.write(line)  # above the progress bar, which stays whole
        else:
            print(line, flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        logs = {k: v for k, v in logs.items() if k != "total_flos"}
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a") as f:
            record = {"step": state.global_step, **logs}
            f.write(
                json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()})
            )
            f.write("\n")
        if "train_runtime" in logs:
            self._write(", ".join(f"{k}: {_format(v)}" for k, v in logs.items()))
            return
        line = short_line(logs, state.global_step, state.max_steps)
        if line is None:
            return
        if not self._told:
            self._write(f"(one line per logging step; every metric goes to {self.path})")
            self._told = True
        self._write(line)


class ConciseProgressCallback(_ConciseLog, ProgressCallback):
    """transformers' progress bar, with `_ConciseLog`'s line instead of the dict of every metric at each log."""

    def __init__(self, max_str_len: int = 100, *, output_dir: str = "."):
        ProgressCallback.__init__(self, max_str_len=max_str_len)
        self._setup_log(output_dir)


class ConcisePrinterCallback(_ConciseLog, TrainerCallback):
    """The same without a progress bar (``disable_tqdm=True``), in place of transformers' `PrinterCallback`."""

    def __init__(self, output_dir: str):
        self._setup_log(output_dir)


def use_concise_console(trainer, output_dir: str) -> None:
    """Replace transformers' per-step dict printing (in the progress bar, or plain) by the short line."""
    had_bar = trainer.pop_callback(ProgressCallback) is not None
    trainer.pop_callback(PrinterCallback)
    trainer.add_callback(
        ConciseProgressCallback(output_dir=output_dir) if had_bar else ConcisePrinterCallback(output_dir)
    )
