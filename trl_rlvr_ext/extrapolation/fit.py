"""`relex_trajectory`: fit a recorded trajectory tensor by tensor and write the predicted checkpoints.

Streamed: for each tensor of θ_0's weight files, in the files' byte order, its history (T, d) is read from the delta
files, fitted (`trl_rlvr_ext.extrapolation.relex`), and θ̂ = θ_0 + Δ̂ of every target is written straight into that
target's output file, whose header is θ_0's. The memory held is one tensor's history and its predictions, not the
model (`TrajectoryReader.peak_elements` records it). Each ``<output_dir>/step<s>/`` is a copy of θ_0's saved folder
(config, tokenizer, adapter config) with the predicted weights: a model folder, or a PEFT adapter folder for an
adapter trajectory, that `from_pretrained` (and ``trl-rlvr-ext eval``) loads.
"""

import json
import logging
import os
import shutil
from collections.abc import Sequence

from .._io import atomic_write
from .relex import (
    RELEX_MODES,
    extrapolation_position,
    history_spacing,
    relex_extrapolate,
    relex_fit_reconstruct,
    relex_reconstruct,
    summarize_reports,
)
from .trajectory import (
    StreamingSafetensorsWriter,
    TrajectoryReader,
    base_dir,
    iter_base_tensors,
    read_header,
    read_manifest,
    tensor_bytes,
    tracked_tensors,
    weight_files,
)


logger = logging.getLogger(__name__)


def variance_report_name(history_steps: int, rank: int) -> str:
    """The authors' report name (``variance_report_h{T_cut}_r{r}.json``)."""
    return f"variance_report_h{history_steps}_r{rank}.json"


def check_relex_request(
    steps: Sequence[int],
    history_steps: int,
    target_steps: Sequence[int],
    mode: str,
    rank: int,
    window: int,
    step_scaling: float,
) -> list[int]:
    """Every check that needs no tensor, with the fix in each message. Returns the history steps."""
    if mode not in RELEX_MODES:
        raise ValueError(f"mode={mode!r} is not a RELEX mode. Use one of {list(RELEX_MODES)}.")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be an integer >= 1, got {rank!r} (paper: 1).")
    if not target_steps:
        raise ValueError("No target step given.")
    if len(set(target_steps)) != len(target_steps) or any(s < 1 for s in target_steps):
        raise ValueError(f"Target steps must be distinct integers >= 1, got {list(target_steps)}.")
    history = [s for s in steps if s <= history_steps]  # the authors' cut: every recorded step up to T_cut
    if not history:
        raise ValueError(
            f"No recorded step is <= history_steps={history_steps}; the trajectory holds steps {_span(steps)}."
        )
    history_spacing(history)
    if step_scaling != 1.0 and mode != "extrapolate":
        raise ValueError(
            f"step_scaling != 1 maps target labels to the fit axis: extrapolate mode only (got {mode!r})."
        )
    if mode == "extrapolate":
        if window != -1 and (isinstance(window, bool) or not isinstance(window, int) or window < 2):
            raise ValueError(f"window must be -1 (the whole history) or an integer >= 2, got {window!r}.")
        if len(history) < 2:
            raise ValueError(
                f"extrapolate fits a line through the history, which needs at least 2 steps; history_steps="
                f"{history_steps} keeps {history}. Raise history_steps or record more often."
            )
    else:
        if window != -1:
            raise ValueError(
                f"window applies to extrapolate only: {mode} fits (or projects) the whole history, as the authors' "
                "script does. Leave window at -1."
            )
        known = set(history) if mode == "fit_reconstruct" else set(steps)
        missing = [s for s in target_steps if s not in known]
        if missing:
            where = "history steps" if mode == "fit_reconstruct" else "recorded steps"
            raise ValueError(f"{mode} predicts at {where} only; {missing} are not among {_span(sorted(known))}.")
    return history


def relex_trajectory(
    trajectory_dir: str,
    output_dir: str,
    history_steps: int,
    target_steps: Sequence[int],
    rank: int = 1,
    mode: str = "extrapolate",
    window: int = -1,
    step_scaling: float = 1.0,
    progress: bool = False,
) -> dict:
    """Fit the trajectory in ``trajectory_dir`` and write ``<output_dir>/step<s>/`` for every target label ``s``, and
    the variance report (returned too).

    Args:
        history_steps: T_cut: the history is every recorded step <= it (the authors' ``--history_steps``).
        target_steps: labels of the checkpoints to write; ``round(s * step_scaling)`` is their fit-axis step.
        rank: r, the subspace rank (paper: 1).
        mode: ``"extrapolate"`` (RELEX), ``"reconstruct"`` (rank-r projection of recorded steps, Finding 1) or
            ``"fit_reconstruct"`` (the line fitted on the whole history, at history steps).
        window: fit the last W history steps (−1: all; extrapolate only).
        step_scaling: target label → fit-axis step factor; explicit, never inferred (the authors' script infers 2.0
            for Qwen2.5-Math-1.5B, see `trl_rlvr_ext.extrapolation.relex.AUTHORS_STEP_SCALING`).
        progress: show a progress bar over the tensors.
    """
    manifest = read_manifest(trajectory_dir)
    target_steps = [int(s) for s in target_steps]
    history = check_relex_request(manifest.steps, history_steps, target_steps, mode, rank, window, step_scaling)
    if mode == "extrapolate":
        inside = [s for s in target_steps if round(s * step_scaling) <= history[-1]]
        if inside:
            logger.warning("target steps %s are not past the last history step %d: interpolated.", inside, history[-1])
    base = base_dir(trajectory_dir)
    tracked = tracked_tensors(base)
    reader = TrajectoryReader(trajectory_dir, history)
    extra_rows = {}  # reconstruct at recorded steps past the history: their own delta rows
    if mode == "reconstruct":
        extra = [s for s in target_steps if s not in history]
        if extra:
            extra_rows = {s: TrajectoryReader(trajectory_dir, [s]) for s in extra}

    step_dirs = {s: os.path.join(output_dir, f"step{s}") for s in target_steps}
    files = weight_files(base)
    for folder in step_dirs.values():
        _copy_folder_without_weights(base, folder, {os.path.basename(p) for p in files})

    per_tensor = []
    bar = _progress(len(tracked), progress)
    try:
        for path in files:
            raw_header, entries = read_header(path)
            writers = {
                s: StreamingSafetensorsWriter(os.path.join(step_dirs[s], os.path.basename(path)), raw_header, entries)
                for s in target_steps
            }
            try:
                for entry, theta_0 in iter_base_tensors(path):
                    if entry.name not in tracked:
                        for writer in writers.values():
                            writer.write(entry.name, tensor_bytes(theta_0))
                        continue
                    predictions, report = _fit_one(
                        reader, extra_rows, entry.name, history, target_steps, mode, rank, window, step_scaling
                    )
                    base_flat = theta_0.reshape(-1).float()
                    for s, writer in writers.items():
                        theta = (base_flat + predictions[s]).to(theta_0.dtype).reshape(theta_0.shape)
                        writer.write(entry.name, tensor_bytes(theta))
                    per_tensor.append({"name": entry.name, "numel": entry.numel, **report})
                    bar.update(1)
                for writer in writers.values():
                    writer.close()
            except BaseException:
                for writer in writers.values():
                    writer.abort()
                raise
    finally:
        bar.close()

    report = {
        "history_steps": history_steps,
        "history": history,
        "history_spacing": history_spacing(history),
        "rank": rank,
        "fit_method": "linear",
        "window": window,
        "mode": mode,
        "step_scaling": step_scaling,
        "target_steps": target_steps,
        "kind": manifest.kind,
        "record_dtype": manifest.dtype,
        "summary": summarize_reports(per_tensor),
        "peak_history_elements": reader.peak_elements,
        "per_tensor": per_tensor,
    }
    if mode == "extrapolate":
        report["fit_positions"] = {
            str(s): extrapolation_position(s, history, window, step_scaling) for s in target_steps
        }
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, variance_report_name(history_steps, rank))
    atomic_write(path, json.dumps(report, indent=2))
    report["path"] = path
    return report


def _fit_one(reader, extra_rows, name, history, target_steps, mode, rank, window, step_scaling):
    deltas = reader.history(name)
    if mode == "extrapolate":
        return relex_extrapolate(deltas, history, target_steps, rank=rank, window=window, step_scaling=step_scaling)
    if mode == "fit_reconstruct":
        return relex_fit_reconstruct(deltas, history, target_steps, rank=rank)
    targets = {s: (extra_rows[s].row(0, name) if s in extra_rows else None) for s in target_steps}
    return relex_reconstruct(deltas, history, targets, rank=rank)


def _copy_folder_without_weights(source: str, target: str, weights: set[str]) -> None:
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(source):
        path = os.path.join(source, name)
        if name not in weights and os.path.isfile(path):
            shutil.copy2(path, os.path.join(target, name))


def _span(steps: Sequence[int]) -> str:
    steps = list(steps)
    if len(steps) <= 6:
        return str(steps)
    return f"[{steps[0]}, {steps[1]}, ..., {steps[-1]}] ({len(steps)} steps)"


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="relex: tensors", unit="tensor")
