"""`RELEXTrajectoryCallback`: record θ_s − θ_0 every k optimizer steps into a trajectory folder that RELEX fits.

Full fine-tuning records every floating-point tensor of the saved model (the authors' choice: norms, biases and
embeddings included; a tied LM head is saved once, as `save_pretrained` saves it). Under PEFT it records the adapter's
tensors (what `save_pretrained` of the `PeftModel` writes), and θ_0 is the adapter at the start of training.
"""

import copy
import logging
import os
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from transformers import TrainerCallback

from ..lora_init.options import rewrites_base
from .trajectory import (
    DELTA_DIR,
    RECORD_DTYPES,
    BaseWeights,
    DeltaBuffer,
    DeltaLayout,
    Manifest,
    base_dir,
    delta_path,
    read_manifest,
    write_delta_file,
    write_manifest,
)


logger = logging.getLogger(__name__)


class RELEXTrajectoryCallback(TrainerCallback):
    r"""
    Record the trajectory of a training run for RELEX (https://arxiv.org/abs/2605.21468): θ_0 at the start of
    training, then θ_s − θ_0 every ``every`` optimizer steps, under ``trajectory_dir`` (see
    `trl_rlvr_ext.extrapolation.trajectory`). ``trl-rlvr-ext relex`` fits it and writes the extrapolated checkpoints.

    `RLVRGRPOTrainer` adds it when ``relex_record_steps > 0``; with any other `transformers.Trainer`:

    ```python
    trainer.add_callback(RELEXTrajectoryCallback("outputs/run/relex_trajectory", every=1, trainer=trainer))
    ```

    Every process takes part in gathering the weights (`accelerate.Accelerator.get_state_dict`: the full state dict
    under DeepSpeed ZeRO-3, which needs ``stage3_gather_16bit_weights_on_model_save``, and under FSDP); the main
    process alone writes. Resuming from a checkpoint continues the same trajectory: the recorded steps after the
    checkpoint are dropped (that future was discarded) and θ_0 is kept. A fresh run refuses a folder that already
    holds another run's steps.

    The training step pays for the gather and for θ_s − θ_0 computed into one buffer (θ_0 read in place from its
    memory-mapped file); a writer thread writes the buffer to disk while training goes on. One write is in flight at
    most (the next recording waits for it, which bounds the host memory to one buffer), a checkpoint or the end of
    training waits for it (the trajectory on disk then lists
    every recorded step up to the checkpoint), and a write that fails raises in the training loop at the next
    recording, checkpoint or end, never silently. A run killed after its checkpoint but before that step's write
    landed records the step when it resumes (the resumed weights are θ_s).

    Logged: ``relex/recorded_steps`` (steps in the trajectory), ``relex/record_seconds`` (time the last recording
    held the training step: the gather, the buffer, and any wait for the previous write) and
    ``relex/write_seconds`` (time of the last finished write, off the training thread), in the trainer's metrics.

    Args:
        trajectory_dir: the trajectory folder.
        every: record when ``global_step % every == 0``.
        dtype: dtype of the stored deltas: ``"float16"`` (the authors'), ``"bfloat16"`` or ``"float32"``.
        trainer: the trainer (or call `bind`), for its accelerator, model, tokenizer and metrics.
    """

    def __init__(self, trajectory_dir: str, every: int = 1, dtype: str = "float16", trainer=None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an integer >= 1 (optimizer steps between recordings), got {every!r}.")
        if dtype not in RECORD_DTYPES:
            raise ValueError(f"dtype={dtype!r} is not supported for the deltas. Use one of {list(RECORD_DTYPES)}.")
        self.trajectory_dir, self.every, self.dtype = str(trajectory_dir), every, dtype
        self.trainer = None
        self._manifest = None
        self._writer: ThreadPoolExecutor | None = None  # the main process's writer thread, made at the first write
        self._pending: Future | None = None  # the write in flight
        self._pending_step: int | None = None  # ... and its step
        self._resumed_step: int | None = None  # a resumed run's first step, checked once for a write that was lost
        self._adapter_model = None  # the PeftModel whose adapter is recorded (None: full weights)
        if trainer is not None:
            self.bind(trainer)

    def bind(self, trainer) -> "RELEXTrajectoryCallback":
        self.trainer = trainer
        check_relex_composes(trainer.accelerator.unwrap_model(trainer.model))
        return self

    # ---------------------------------------------------------------- gathering
    def _unwrapped(self):
        return self.trainer.accelerator.unwrap_model(self.trainer.model)

    def _is_adapter(self) -> bool:
        from peft import PeftModel

        return isinstance(self._unwrapped(), PeftModel)

    def _gathered_state_dict(self) -> dict[str, torch.Tensor]:
        """The full state dict on the main process, gathered as `Trainer.save_model` gathers it (every process must
        call this); under PEFT, the adapter's tensors under the names its saved file uses."""
        trainer = self.trainer
        wrapped = trainer.model_wrapped if trainer.is_deepspeed_enabled else trainer.model
        # unwrap=False: without DeepSpeed or FSDP, `Trainer._save` takes `trainer.model.state_dict()` as it is (the
        # trainer keeps the unwrapped model there); unwrapping again at every step costs accelerate a package-metadata
        # lookup, most of a recording's time on a small model
        state_dict = trainer.accelerator.get_state_dict(wrapped, unwrap=False)
        if state_dict is not None and self._adapter_model is not None:
            from peft import get_peft_model_state_dict

            state_dict = get_peft_model_state_dict(self._adapter_model, state_dict=state_dict)
        return state_dict

    # ---------------------------------------------------------------- events
    def on_train_begin(self, args, state, control, **kwargs):
        if self.trainer is None:
            raise RuntimeError("RELEXTrajectoryCallback needs its trainer: pass trainer= or call bind(trainer).")
        kind = "adapter" if self._is_adapter() else "model"
        self._adapter_model = self._unwrapped() if kind == "adapter" else None  # the same object for the whole run
        manifest = self._resume_or_start(kind, state.global_step)  # the same on every process (each read it first)
        if manifest is None:  # a fresh trajectory: θ_0 is saved by the main process
            state_dict = self._gathered_state_dict()
            if self.trainer.accelerator.is_main_process:
                self._save_base(state_dict)
                manifest = Manifest(kind=kind, dtype=self.dtype, every=self.every)
                write_manifest(self.trajectory_dir, manifest)
            self.trainer.accelerator.wait_for_everyone()
            manifest = read_manifest(self.trajectory_dir)
        self._manifest = manifest
        self._base = BaseWeights(base_dir(self.trajectory_dir))
        self._delta_layout = DeltaLayout(self._base, RECORD_DTYPES[self.dtype])
        self._resumed_step = state.global_step if state.global_step > 0 else None

    def on_step_begin(self, args, state, control, **kwargs):
        self._record_lost_resume_step(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step % self.every != 0 or step in self._manifest.steps:
            return
        self._record(step)
        if control.should_save or control.should_training_stop:
            # the checkpoint written next must not name a step whose trajectory file is still being written
            self._wait()

    def on_save(self, args, state, control, **kwargs):
        # A save asked for by a callback after this one: the checkpoint is written by now, so wait at least before
        # training goes on (a kill in between is repaired when the run resumes, _record_lost_resume_step)
        self._wait()

    def on_train_end(self, args, state, control, **kwargs):
        self._record_lost_resume_step(state.global_step)  # a resume at the last step runs no step
        self._wait()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        self._base.close()

    # ---------------------------------------------------------------- recording
    def _record(self, step: int) -> None:
        """Record θ_s − θ_0 for ``step`` (every process calls this: the gather is collective)."""
        start = time.perf_counter()
        self._wait()  # one write in flight at most: the host holds one copy of the recorded tensors
        state_dict = self._gathered_state_dict()
        main = self.trainer.accelerator.is_main_process
        deltas = self._deltas(state_dict) if main else None
        self._manifest.steps.append(step)
        if main:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relex-writer")
            manifest = copy.deepcopy(self._manifest)  # the steps as of this write, not as of a later one
            self._pending = self._writer.submit(self._write_step, step, deltas, manifest)
            self._pending_step = step
        self._log("relex/record_seconds", time.perf_counter() - start)
        self._log("relex/recorded_steps", float(len(self._manifest.steps)))

    def _record_lost_resume_step(self, global_step: int) -> None:
        """A run killed after checkpoint s but before step s's write landed resumes at s with θ_s loaded and step s
        missing from the trajectory: record it now, so the trajectory has no hole. Runs once, at the first step of a
        resumed run (the weights are loaded by then on every path, DeepSpeed and FSDP included)."""
        step, self._resumed_step = self._resumed_step, None
        if step is None or step != global_step or step % self.every != 0 or step in self._manifest.steps:
            return
        logger.warning("RELEX: step %d is missing from the trajectory (its write was lost); recording it now.", step)
        self._record(step)
        self._wait()

    def _wait(self) -> None:
        """Wait for the write in flight; raise here, in the training loop, if it failed."""
        if self._pending is None:
            return
        pending, step = self._pending, self._pending_step
        self._pending = self._pending_step = None
        try:
            seconds = pending.result()
        except Exception as error:
            raise RuntimeError(
                f"RELEX: writing step {step} of the trajectory to {self.trajectory_dir!r} failed ({error}); the "
                "trajectory on disk ends at the step before it. Fix the cause (disk space, permissions) and resume "
                "from the last checkpoint: the trajectory continues from there."
            ) from error
        self._log("relex/write_seconds", seconds)

    def _log(self, name: str, value: float) -> None:
        metrics = getattr(self.trainer, "_metrics", None)  # TRL trainers average these into each log record
        if metrics is not None:
            metrics["train"][name].append(value)

    # ---------------------------------------------------------------- files
    def _resume_or_start(self, kind: str, global_step: int) -> Manifest | None:
        directory = self.trajectory_dir
        manifest = read_manifest(directory) if os.path.isfile(os.path.join(directory, "manifest.json")) else None
        # Every process reads the folder before the main process changes it (θ_0 and a new manifest in on_train_begin,
        # a pruned manifest below): read after, another process would take the other branch and wait at a barrier
        # that the main process never reaches
        self.trainer.accelerator.wait_for_everyone()
        if manifest is None:
            if global_step > 0:
                raise ValueError(
                    f"Resuming at step {global_step}, but {directory!r} holds no RELEX trajectory: θ_0 (the weights "
                    "at step 0) is unknown, so the deltas could not be recorded. Resume with the relex_trajectory_dir "
                    "of the original run, or record a new run from step 0."
                )
            return None
        mismatch = {
            name: (old, new)
            for name, old, new in (("kind", manifest.kind, kind), ("dtype", manifest.dtype, self.dtype))
            if old != new
        }
        if manifest.every != self.every:
            mismatch["every"] = (manifest.every, self.every)
        if mismatch:
            raise ValueError(
                f"{directory!r} holds a trajectory recorded with {', '.join(f'{k}={v[0]!r}' for k, v in mismatch.items())}"
                f"; this run records {', '.join(f'{k}={v[1]!r}' for k, v in mismatch.items())}. Use the same settings "
                "to continue it, or another relex_trajectory_dir."
            )
        if global_step == 0 and manifest.steps:
            raise ValueError(
                f"{directory!r} already holds a trajectory of {len(manifest.steps)} steps (up to step "
                f"{manifest.steps[-1]}), and this run starts at step 0. Choose another relex_trajectory_dir, delete "
                "that folder, or resume the run that recorded it (resume_from_checkpoint)."
            )
        later = [s for s in manifest.steps if s > global_step]
        if later:
            logger.warning(
                "RELEX: resuming at step %d; dropping the %d recorded steps after it (%s), which the resumed run "
                "records again.",
                global_step,
                len(later),
                later if len(later) <= 6 else f"{later[0]} .. {later[-1]}",
            )
            if self.trainer.accelerator.is_main_process:
                manifest.steps = [s for s in manifest.steps if s <= global_step]
                write_manifest(directory, manifest)
                for step in later:
                    if os.path.exists(delta_path(directory, step)):
                        os.remove(delta_path(directory, step))
            else:
                manifest.steps = [s for s in manifest.steps if s <= global_step]
            self.trainer.accelerator.wait_for_everyone()
        return manifest

    def _save_base(self, state_dict: dict[str, torch.Tensor]) -> None:
        base = base_dir(self.trajectory_dir)
        if os.path.isdir(base):  # a half-written start (no manifest yet): begin again
            shutil.rmtree(base)
        shutil.rmtree(os.path.join(self.trajectory_dir, DELTA_DIR), ignore_errors=True)
        # As `Trainer.save_model` writes it: a model folder, or (PEFT) the adapter folder, from the gathered weights
        self._unwrapped().save_pretrained(base, state_dict=state_dict, safe_serialization=True)
        processing_class = getattr(self.trainer, "processing_class", None)
        if processing_class is not None:
            processing_class.save_pretrained(base)

    def _deltas(self, state_dict: dict[str, torch.Tensor]) -> DeltaBuffer:
        """θ_s − θ_0 now, on the training step, into a buffer of its own: the next optimizer step changes the
        parameters in place while the writer thread still writes."""
        missing = [name for name in self._base.names() if name not in state_dict]
        if missing:
            raise KeyError(
                f"RELEX: the saved θ_0 has tensors the model's state dict lacks ({missing[:3]}): this architecture "
                "renames its weights when saving, which the recorder does not follow."
            )
        return self._delta_layout.compute(state_dict)

    def _write_step(self, step: int, deltas: DeltaBuffer, manifest: Manifest) -> float:
        """The writer thread's work: the step's file, then the manifest (last: it never lists a step whose file is
        not complete). Returns its seconds."""
        start = time.perf_counter()
        write_delta_file(self.trajectory_dir, step, deltas)
        write_manifest(self.trajectory_dir, manifest)
        return time.perf_counter() - start


def check_relex_composes(model) -> None:
    """Refuse what RELEX cannot record faithfully, before training starts."""
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        return
    if len(model.peft_config) != 1:
        raise ValueError(
            f"RELEX records one adapter, but the model has {len(model.peft_config)} ({sorted(model.peft_config)}). "
            "Train with a single adapter."
        )
    config = next(iter(model.peft_config.values()))
    init = getattr(config, "init_lora_weights", True)
    if isinstance(init, str) and rewrites_base(init):
        raise ValueError(
            f"RELEX records the adapter, but init_lora_weights={init!r} rewrites the base weights (a residual "
            "W − γ·B₀A₀): the extrapolated adapters would apply to that residual, not to the saved base model. Use an "
            "init that leaves the base untouched (PEFT's default, 'gaussian', or lora_init 'rlpo' / 'rlmo'), or "
            "record full fine-tuning."
        )
