"""RELEX's recorder in RLVRGRPOTrainer: off by default (stock TRL), on it observes only (the run is stock TRL's to the
bit), and it records θ_0 and θ_s − θ_0 (full weights or the LoRA adapter), resumably."""

import json
import logging

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from safetensors.torch import load_file
from test_grpo_trainer import _assert_same_run, _step_logs, _train
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.extrapolation.callback import RELEXTrajectoryCallback
from trl_rlvr_ext.extrapolation.trajectory import delta_path, read_manifest


def _recorders(trainer):
    return [c for c in trainer.callback_handler.callbacks if isinstance(c, RELEXTrajectoryCallback)]


def test_off_by_default_no_recorder_and_stock_callbacks(tiny_model_path, tmp_path):
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path / "ours", max_steps=1))
    assert args.relex_record_steps == 0 and args.relex_trajectory_dir is None
    ours = RLVRGRPOTrainer(model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    stock = GRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=GRPOConfig(**grpo_kwargs(tmp_path / "stock", max_steps=1)),
        train_dataset=prompt_dataset(),
    )
    assert not _recorders(ours)
    # the methods' step hooks (here the signal check's: on by default, observes only) are the one callback stock TRL
    # does not have
    assert [m.name for m in ours.methods] == ["signal_check", "reward_guard"]
    ours_types = [type(c) for c in ours.callback_handler.callbacks if type(c).__name__ != "_MethodsCallback"]
    assert ours_types == [type(c) for c in stock.callback_handler.callbacks]


def test_recording_observes_only_the_run_is_stock_trl(tiny_model_path, tmp_path):
    """Recording on: the same losses, metrics (but relex/*) and parameters as stock GRPOTrainer, to the bit."""
    stock, _, stock_after = _train(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "stock")
    ours, _before, ours_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "ours", relex_record_steps=1
    )
    _assert_same_run(stock, ours, stock_after, ours_after, exclude_prefix="relex/")
    logs = _step_logs(ours)
    assert [log["relex/recorded_steps"] for log in logs] == [1.0, 2.0, 3.0, 4.0]
    assert all(log["relex/record_seconds"] > 0 for log in logs)


def test_full_weight_trajectory(tiny_model_path, tmp_path):
    trainer, before, after = _train(
        RLVRGRPOTrainer,
        RLVRGRPOConfig,
        tiny_model_path,
        tmp_path,
        relex_record_steps=2,
        relex_record_dtype="float32",
    )
    directory = tmp_path / "relex_trajectory"
    assert trainer.args.relex_trajectory_dir == str(directory)
    manifest = read_manifest(str(directory))
    assert (manifest.kind, manifest.dtype, manifest.every, manifest.steps) == ("model", "float32", 2, [2, 4])
    assert (directory / "base" / "config.json").is_file() and (directory / "base" / "tokenizer_config.json").is_file()
    base = load_file(directory / "base" / "model.safetensors")
    for name, value in before.items():  # θ_0 is the model before the first step
        assert torch.equal(base[name], value), name
    last = load_file(delta_path(str(directory), 4))
    assert set(last) == set(base)  # every tensor of the saved model (the tied LM head saved once, as save_pretrained)
    moved = 0
    for name, value in after.items():
        torch.testing.assert_close(base[name] + last[name], value, rtol=0, atol=1e-6)
        moved += bool(last[name].abs().max() > 0)
    assert moved > len(after) // 2, "the run barely moved: the test is void"
    step2 = load_file(delta_path(str(directory), 2))
    assert any(not torch.equal(step2[n], last[n]) for n in last)


def test_adapter_trajectory(tiny_model_path, tmp_path):
    from peft import LoraConfig

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=1, max_steps=2, learning_rate=1e-2))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    trainer.train()
    directory = tmp_path / "relex_trajectory"
    manifest = read_manifest(str(directory))
    assert manifest.kind == "adapter" and manifest.steps == [1, 2]
    assert (directory / "base" / "adapter_config.json").is_file()
    base = load_file(directory / "base" / "adapter_model.safetensors")
    delta = load_file(delta_path(str(directory), 2))
    assert set(delta) == set(base) and all("lora_" in name for name in delta)
    assert all(torch.equal(v, torch.zeros_like(v)) for n, v in base.items() if "lora_B" in n)  # PEFT's init: B = 0
    assert any(delta[n].abs().max() > 0 for n in delta if "lora_B" in n)


def test_resume_continues_the_trajectory_and_a_fresh_run_is_refused(tiny_model_path, tmp_path, caplog):
    save = {"save_strategy": "steps", "save_steps": 2, "relex_record_steps": 1}
    _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path, **save)
    directory = tmp_path / "relex_trajectory"
    assert read_manifest(str(directory)).steps == [1, 2, 3, 4]
    base_before = (directory / "base" / "model.safetensors").read_bytes()
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, **save))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    with caplog.at_level(logging.WARNING):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert "dropping the 2 recorded steps after it" in caplog.text
    assert read_manifest(str(directory)).steps == [1, 2, 3, 4]
    assert (directory / "base" / "model.safetensors").read_bytes() == base_before  # θ_0 kept
    fresh = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=1)),
        train_dataset=prompt_dataset(),
    )
    with pytest.raises(ValueError, match="already holds a trajectory of 4 steps"):
        fresh.train()
    other = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=2, save_strategy="steps", save_steps=2)),
        train_dataset=prompt_dataset(),
    )
    with pytest.raises(ValueError, match="recorded with every=1; this run records every=2"):
        other.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_resume_without_a_trajectory_is_refused(tiny_model_path, tmp_path):
    _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path, save_strategy="steps", save_steps=2)
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=1))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    with pytest.raises(ValueError, match="holds no RELEX trajectory: θ_0"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"relex_record_steps": -1}, "relex_record_steps must be an integer >= 0"),
        ({"relex_record_steps": 1, "relex_record_dtype": "int8"}, "relex_record_dtype='int8' is not supported"),
        ({"relex_record_steps": 1, "lora_init": "pissa"}, "rewrites the base weights"),
    ],
)
def test_config_checks(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **overrides)


def test_a_residual_peft_init_is_refused(tiny_model_path, tmp_path):
    from peft import LoraConfig

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=1, max_steps=1))
    with pytest.raises(ValueError, match="init_lora_weights='pissa' rewrites the base weights"):
        RLVRGRPOTrainer(
            model=tiny_model_path,
            reward_funcs=digit_reward,
            args=args,
            train_dataset=prompt_dataset(),
            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights="pissa"),
        )


def test_manifest_is_json_with_the_documented_fields(tiny_model_path, tmp_path):
    _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path, relex_record_steps=4)
    data = json.loads((tmp_path / "relex_trajectory" / "manifest.json").read_text())
    assert data == {
        "format": "trl_rlvr_ext.relex_trajectory",
        "version": 1,
        "kind": "model",
        "dtype": "float16",
        "every": 4,
        "base": "base",
        "steps": [4],
    }
