"""The one mechanism for our features' checkpoint state (curation, NSR): CheckpointStateMixin, without a model."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trl_rlvr_ext.grpo.checkpoint_state import CheckpointState, CheckpointStateMixin


class FakeTrainer:
    """The parts of transformers' Trainer the mixin relies on; records the base calls."""

    def __init__(self, output_dir, rank=0, save_only_model=False):
        self.output_dir, self.calls = str(output_dir), []
        self.accelerator = SimpleNamespace(process_index=rank)
        self.args = SimpleNamespace(should_save=rank == 0, save_only_model=save_only_model)
        self.state = SimpleNamespace(global_step=3)

    def _get_output_dir(self, trial):
        return self.output_dir

    def _save_checkpoint(self, model, trial):
        self.calls.append("save")
        Path(self.output_dir, "checkpoint-3").mkdir(parents=True, exist_ok=True)

    def _load_optimizer_and_scheduler(self, checkpoint):
        self.calls.append(("load", checkpoint))


class Trainer(CheckpointStateMixin, FakeTrainer):
    pass


def make(tmp_path, rank=0, save_only_model=False, shared=None, per_rank=None, missing=None):
    trainer = Trainer(tmp_path, rank=rank, save_only_model=save_only_model)
    loaded = {}
    trainer._register_checkpoint_state(
        CheckpointState(
            "shared.json",
            lambda: shared,
            lambda value, path: loaded.__setitem__("shared", (value, path)),
            missing=missing,
        )
    )
    trainer._register_checkpoint_state(
        CheckpointState(
            "gen_{rank}.pth",
            lambda: per_rank,
            lambda value, path: loaded.__setitem__("per_rank", (value, path)),
            per_rank=True,
        )
    )
    return trainer, loaded


def test_shared_state_is_saved_once_as_json_and_per_rank_state_by_every_process(tmp_path):
    checkpoint = tmp_path / "checkpoint-3"
    for rank in (0, 1):
        trainer, _ = make(tmp_path, rank=rank, shared={"a": [1, 2]}, per_rank=torch.tensor([rank, 7]))
        trainer._save_checkpoint(None, None)
        assert trainer.calls == ["save"]  # transformers saves first
    assert sorted(p.name for p in checkpoint.iterdir()) == ["gen_0.pth", "gen_1.pth", "shared.json"]
    assert json.loads((checkpoint / "shared.json").read_text()) == {"a": [1, 2]}
    assert torch.load(checkpoint / "gen_1.pth", weights_only=True).tolist() == [1, 7]

    trainer, loaded = make(tmp_path, rank=1)
    trainer._load_optimizer_and_scheduler(str(checkpoint))
    assert trainer.calls == [("load", str(checkpoint))]
    assert loaded["shared"] == ({"a": [1, 2]}, str(checkpoint / "shared.json"))
    assert loaded["per_rank"][0].tolist() == [1, 7] and loaded["per_rank"][1] == str(checkpoint / "gen_1.pth")


def test_nothing_saved_for_none_and_per_rank_state_follows_save_only_model(tmp_path):
    trainer, _ = make(tmp_path, shared=None, per_rank=torch.tensor([1]))
    trainer._save_checkpoint(None, None)
    assert [p.name for p in (tmp_path / "checkpoint-3").iterdir()] == ["gen_0.pth"]
    (tmp_path / "checkpoint-3" / "gen_0.pth").unlink()
    # save_only_model: transformers skips its RNG states, and so does the per-rank state; the shared state is kept
    trainer, _ = make(tmp_path, save_only_model=True, shared={"x": 1}, per_rank=torch.tensor([1]))
    trainer._save_checkpoint(None, None)
    assert [p.name for p in (tmp_path / "checkpoint-3").iterdir()] == ["shared.json"]


def test_missing_state_fails_clearly_or_is_skipped(tmp_path):
    (tmp_path / "empty").mkdir()
    trainer, loaded = make(tmp_path, missing="resume with the setting that saved it.")
    with pytest.raises(FileNotFoundError, match="empty has no shared.json: resume with the setting that saved it."):
        trainer._load_optimizer_and_scheduler(str(tmp_path / "empty"))
    trainer, loaded = make(tmp_path)
    trainer._load_optimizer_and_scheduler(str(tmp_path / "empty"))
    trainer._load_optimizer_and_scheduler(None)
    assert loaded == {}


def test_no_registered_state_is_the_base_trainer(tmp_path):
    trainer = Trainer(tmp_path)
    trainer._save_checkpoint(None, None)
    trainer._load_optimizer_and_scheduler(str(tmp_path / "checkpoint-3"))
    assert trainer.calls == ["save", ("load", str(tmp_path / "checkpoint-3"))]
    assert list((tmp_path / "checkpoint-3").iterdir()) == []
