"""Warm-started reasoning-gym base models: cached by their settings, atomic, offline; and the regime they put RL in."""

import json
from pathlib import Path

import pytest


pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")

from trl_rlvr_ext import gym_bases as base_module
from trl_rlvr_ext.gym_bases import (
    PRESETS,
    chance_rates,
    describe_base,
    get_gym_base_model_path,
    is_gym_base_model_cached,
)


TINY = {
    "dataset": "reasoning_gym:chain_sum?size=50&test_size=10&max_terms=2&max_digits=1&strip_template=true",
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "intermediate_size": 32,
    "num_steps": 3,
    "batch_size": 4,
    "warmup_steps": 1,
}


def test_build_then_cache_hit_then_other_settings_other_directory(tmp_path, monkeypatch):
    assert not is_gym_base_model_cached(tmp_path, **TINY)
    path = get_gym_base_model_path(cache_dir=tmp_path, progress=False, **TINY)
    assert is_gym_base_model_cached(tmp_path, **TINY) and Path(path).parent == tmp_path / "reasoning_gym"
    metadata = json.loads((Path(path) / "warmstart.json").read_text())
    assert metadata["dataset_name"] == TINY["dataset"] and metadata["reasoning_gym_version"]
    assert [p.name for p in (tmp_path / "reasoning_gym").iterdir()] == [Path(path).name]

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(base_module, "train_gym_base_model", no_rebuild)
    assert get_gym_base_model_path(cache_dir=tmp_path, **TINY) == path
    with pytest.raises(AssertionError, match="rebuilt"):  # another task: another base
        get_gym_base_model_path(cache_dir=tmp_path, **{**TINY, "dataset": TINY["dataset"] + "&seed=1"})
    # an interrupted build leaves nothing behind
    assert [p.name for p in (tmp_path / "reasoning_gym").iterdir()] == [Path(path).name]

    stats = describe_base(path, TINY["dataset"], num_problems=3, num_samples=2)
    assert set(stats["pass_at_k"]) == {1, 2} and stats["num_problems"] == 3
    assert 0 <= stats["chance_pass_at_k"][1] <= stats["chance_pass_at_k"][2] <= 1


def test_the_demonstrations_are_the_rewards_answer_convention(tmp_path):
    from trl_rlvr_ext.data import load_split
    from trl_rlvr_ext.rewards.reasoning_gym import reasoning_gym_reward

    row = load_split(TINY["dataset"], "train")[0]
    completion = base_module.completion_of(row["answer"])
    assert reasoning_gym_reward([completion], task=[row["task"]], entry=[row["entry"]]) == [1.0]


def test_chance_rates_hand_computed():
    assert chance_rates(["1", "1", "2", "3"], ["1", "3", "4"]) == [0.5, 0.25, 0.0]


def test_presets_resolve_and_bad_settings_fail(tmp_path):
    from trl_rlvr_ext.tasks.reasoning_gym import parse_name

    for name in PRESETS.values():
        parse_name(name)
    with pytest.raises(ValueError, match="neither a preset"):
        get_gym_base_model_path(cache_dir=tmp_path, dataset="chain_summ")
    with pytest.raises(TypeError, match="settings are"):
        get_gym_base_model_path(cache_dir=tmp_path, hiden_size=3)
    assert not (tmp_path / "reasoning_gym").exists()
