"""One mechanism for the state our trainer features keep in a checkpoint (curation, NSR's generator).

A feature registers a `CheckpointState` (`_register_checkpoint_state`); `CheckpointStateMixin` saves every registered
state after transformers has saved the checkpoint, and restores it when transformers restores the optimizer and the
scheduler, on every process, before the first training step.

Why not transformers' `ExportableState` callbacks (state kept in ``trainer_state.json``): they do not fit this state.

- They are restored only when ``restore_callback_states_from_checkpoint=True``, which defaults to False: by default a
  resumed run would silently start curation afresh and redraw NSR's noise.
- ``trainer_state.json`` is written by the main process from ``callback.state()``, where no collective call is
  possible, so it cannot hold per-process state such as NSR's generator (seeded ``clip_recovery_seed + rank``).
- Restoring rebuilds a callback from its JSON ``args``, so the state cannot point back at the trainer's controller, and
  a checkpoint without the state is skipped with a warning, where resuming curation from it must fail clearly.
"""

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .._io import atomic_target, atomic_write


@dataclass(frozen=True)
class CheckpointState:
    """Named state saved in every checkpoint and restored on resume.

    Args:
        file_name: file in the checkpoint folder; ``{rank}`` is replaced by the process index when ``per_rank``.
        state_dict: returns the state to save, or None to save nothing.
        load_state_dict: restores a saved state; called with the state and the path of its file (for messages).
        per_rank: False: the state is the same on every process, and the main process saves it as JSON. True: each
            process saves its own with `torch.save`, next to transformers' per-process RNG states (so not with
            ``save_only_model``, as those).
        missing: error message when a resumed checkpoint lacks the file; None: such a checkpoint is resumed without it.
        binary: for a state the same on every process that holds tensors (POPO's EMA target and predictor): the main
            process saves it with `torch.save` (tensors on the CPU) instead of JSON, and every process loads it.
    """

    file_name: str
    state_dict: Callable[[], Any]
    load_state_dict: Callable[[Any, str], None]
    per_rank: bool = False
    missing: str | None = None
    binary: bool = False


class CheckpointStateMixin:
    """Saves and restores the `CheckpointState`s registered with `_register_checkpoint_state`."""

    _checkpoint_states = ()

    def _register_checkpoint_state(self, state: CheckpointState) -> None:
        self._checkpoint_states = (*self._checkpoint_states, state)

    def _checkpoint_state_path(self, directory: str, state: CheckpointState) -> str:
        name = state.file_name.format(rank=self.accelerator.process_index) if state.per_rank else state.file_name
        return os.path.join(directory, name)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        output_dir = os.path.join(
            self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        )
        for state in self._checkpoint_states:
            if state.per_rank and self.args.save_only_model:  # saved with transformers' RNG states, or not at all
                continue
            if not state.per_rank and not self.args.should_save:  # one copy, by the main process
                continue
            value = state.state_dict()
            if value is None:
                continue
            path = self._checkpoint_state_path(output_dir, state)
            # Written to a temporary file and renamed: a run killed mid-save never leaves a half-written state file
            if state.per_rank or state.binary:
                with atomic_target(path) as tmp:
                    torch.save(value, tmp)
            else:
                atomic_write(path, json.dumps(value))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        for state in self._checkpoint_states:
            path = self._checkpoint_state_path(checkpoint, state)
            if not os.path.isfile(path):
                if state.missing is not None:
                    raise FileNotFoundError(f"{checkpoint} has no {os.path.basename(path)}: {state.missing}")
                continue
            if state.per_rank or state.binary:
                value = torch.load(path, weights_only=True)
            else:
                with open(path) as f:
                    value = json.load(f)
            state.load_state_dict(value, path)
