"""RELEX's recorder in RLVRGRPOTrainer: off by default (stock TRL), on it observes only (the run is stock TRL's to the
bit), and it records θ_0 and θ_s − θ_0 (full weights or the LoRA adapter), resumably."""

import json
import logging
import os
import time
from pathlib import Path

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from safetensors.torch import load_file
from test_grpo_trainer import _assert_same_run, _step_logs, _train
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.extrapolation.callback import RELEXTrajectoryCallback
from trl_rlvr_ext.extrapolation.trajectory import delta_path, read_manifest, write_manifest


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


def _resume_at_checkpoint_2(model_path, tmp_path, settings, caplog):
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, **settings))
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    with caplog.at_level(logging.WARNING):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_resume_continues_the_trajectory_and_a_fresh_run_is_refused(tiny_model_path, tmp_path, caplog):
    save = {"save_strategy": "steps", "save_steps": 2, "relex_record_steps": 1}
    _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path, **save)
    directory = tmp_path / "relex_trajectory"
    assert read_manifest(str(directory)).steps == [1, 2, 3, 4]
    base_before = (directory / "base" / "model.safetensors").read_bytes()
    _resume_at_checkpoint_2(tiny_model_path, tmp_path, save, caplog)
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


class _StateAtStepEnd(TrainerCallback):
    """The parameters at each step's end (added before the recorder, so it sees what the recorder records)."""

    def __init__(self, trainer):
        self.trainer, self.states = trainer, {}

    def on_step_end(self, args, state, control, **kwargs):
        self.states[state.global_step] = {k: v.detach().clone() for k, v in self.trainer.model.state_dict().items()}


def test_every_step_records_its_own_weights_while_the_writer_lags(tiny_model_path, tmp_path, monkeypatch):
    """The delta is written off the training thread: a writer slower than the steps must still write θ_s − θ_0 of
    its own step (the copy taken at the step's end), not of the weights a later optimizer step left."""
    original = RELEXTrajectoryCallback._write_step

    def slow_write(self, step, deltas, manifest):
        time.sleep(0.5)  # several optimizer steps' time on the tiny model: the next step runs before this write
        return original(self, step, deltas, manifest)

    monkeypatch.setattr(RELEXTrajectoryCallback, "_write_step", slow_write)
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=1, relex_record_dtype="float32"))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    recorder = _recorders(trainer)[0]
    trainer.remove_callback(recorder)
    seen = _StateAtStepEnd(trainer)
    trainer.add_callback(seen)
    trainer.add_callback(recorder)
    trainer.train()
    directory = str(tmp_path / "relex_trajectory")
    assert read_manifest(directory).steps == [1, 2, 3, 4]
    base = load_file(f"{directory}/base/model.safetensors")
    for step, state in seen.states.items():
        delta = load_file(delta_path(directory, step))
        for name in delta:
            assert torch.equal(delta[name], state[name].float() - base[name].float()), (step, name)
    assert any(not torch.equal(seen.states[1][n], seen.states[2][n]) for n in base), "the run did not move: void"
    logs = _step_logs(trainer)
    assert all("relex/write_seconds" in log for log in logs[1:])  # each write, collected at the next recording
    # one write in flight at most: the next recording waited for the slow one (host memory: one copy)
    assert all(log["relex/record_seconds"] > 0.25 for log in logs[1:])


def test_a_failed_write_raises_in_the_training_loop(tiny_model_path, tmp_path, monkeypatch):
    def full_disk(directory, step, deltas):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("trl_rlvr_ext.extrapolation.callback.write_delta_file", full_disk)
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=1))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    with pytest.raises(RuntimeError, match=r"RELEX: writing step 1 of the trajectory .* failed .*No space left"):
        trainer.train()
    assert trainer.state.global_step == 2  # raised at the next recording, not silently at the end
    assert read_manifest(str(tmp_path / "relex_trajectory")).steps == []


def test_a_write_lost_to_a_kill_is_recorded_when_the_run_resumes(tiny_model_path, tmp_path, caplog):
    """Killed after checkpoint 2 was written but before step 2's write landed: the resumed run (θ_2 loaded) records
    step 2 before its first step, the same bytes as the uninterrupted run's."""
    save = {"save_strategy": "steps", "save_steps": 2, "relex_record_steps": 1}
    _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path, **save)
    directory = str(tmp_path / "relex_trajectory")
    uninterrupted = {step: Path(delta_path(directory, step)).read_bytes() for step in (1, 2, 3, 4)}
    manifest = read_manifest(directory)
    manifest.steps = [1]  # as the kill left it: step 2's file and manifest entry never written
    write_manifest(directory, manifest)
    for step in (2, 3, 4):
        os.remove(delta_path(directory, step))
    _resume_at_checkpoint_2(tiny_model_path, tmp_path, save, caplog)
    assert "step 2 is missing from the trajectory" in caplog.text
    assert read_manifest(directory).steps == [1, 2, 3, 4]
    for step, data in uninterrupted.items():
        assert Path(delta_path(directory, step)).read_bytes() == data, step


@pytest.mark.parametrize("record_dtype", ["float16", "bfloat16", "float32"])
def test_delta_file_holds_the_rounded_float32_difference(tmp_path, record_dtype):
    """The recorder's own safetensors writer: what safetensors reads back is (θ_s − θ_0 in float32) rounded once to
    the record dtype, for float32, bfloat16 and empty tensors of θ_0; integer tensors are not recorded."""
    from safetensors.torch import save_file

    from trl_rlvr_ext.extrapolation.trajectory import RECORD_DTYPES, BaseWeights, DeltaLayout, write_delta_file

    generator = torch.Generator().manual_seed(0)
    theta_0 = {
        "w": torch.randn(3, 5, generator=generator),
        "b": torch.randn(7, generator=generator).to(torch.bfloat16),
        "empty": torch.zeros(0, 4),
        "ids": torch.arange(4),
    }
    (tmp_path / "base").mkdir()
    save_file(theta_0, tmp_path / "base" / "model.safetensors")
    theta_s = {name: value + 1e-3 * torch.ones_like(value) for name, value in theta_0.items()}
    base = BaseWeights(str(tmp_path / "base"))
    assert sorted(base.names()) == ["b", "empty", "w"]
    dtype = RECORD_DTYPES[record_dtype]
    path = write_delta_file(str(tmp_path), 3, DeltaLayout(base, dtype).compute(theta_s))
    base.close()
    written = load_file(path)
    assert set(written) == {"w", "b", "empty"}
    for name, value in written.items():
        expected = (theta_s[name].float() - theta_0[name].float()).to(dtype)
        assert value.dtype == dtype and torch.equal(value, expected), name
    assert written["w"].abs().min() > 0  # the deltas are not all zero: the test can fail


def test_every_process_takes_the_same_branch_however_late_it_reads(tiny_model_path, tmp_path):
    """Two processes of one launch starting a trajectory, the second reading the folder late: it must not find the
    manifest the main process just wrote and skip the barrier the main process waits at (a hang under DDP, ZeRO or
    FSDP). Here the processes are two threads, and the barrier one `threading.Barrier`."""
    import threading
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM

    barrier = threading.Barrier(2, timeout=10)
    errors, recorders = [], {}

    def process(main: bool):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        accelerator = SimpleNamespace(
            is_main_process=main,
            wait_for_everyone=barrier.wait,
            get_state_dict=lambda wrapped, unwrap=True: wrapped.state_dict(),
            unwrap_model=lambda wrapped: wrapped,
        )
        trainer = SimpleNamespace(
            accelerator=accelerator,
            model=model,
            model_wrapped=model,
            is_deepspeed_enabled=False,
            processing_class=None,
        )
        recorder = RELEXTrajectoryCallback(str(tmp_path / "trajectory"), trainer=trainer)
        if not main:
            time.sleep(1.0)  # the main process would have written θ_0 and the manifest by now
        try:
            recorder.on_train_begin(None, SimpleNamespace(global_step=0), None)
        except threading.BrokenBarrierError as error:
            errors.append(error)
        recorders[main] = recorder

    threads = [threading.Thread(target=process, args=(main,)) for main in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, "a process skipped the barrier the other waited at"
    assert recorders[True]._manifest.to_dict() == recorders[False]._manifest.to_dict()


@pytest.mark.slow
def test_adapter_trajectory_on_the_real_model(tmp_path):
    """SmolLM2-135M-Instruct with LoRA: the recorder writes the adapter's every tensor, and θ_0 plus the last delta is
    the trained adapter (float32 deltas: to float32's rounding of the subtraction)."""
    from peft import LoraConfig, get_peft_model_state_dict

    args = RLVRGRPOConfig(
        **grpo_kwargs(tmp_path, relex_record_steps=1, relex_record_dtype="float32", max_steps=2, learning_rate=1e-2)
    )
    trainer = RLVRGRPOTrainer(
        model="smollm2-135m-instruct",
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    assert trainer.model.config.num_hidden_layers == 30  # the real model, not the toy
    trainer.train()
    directory = str(tmp_path / "relex_trajectory")
    assert read_manifest(directory).steps == [1, 2]
    base = load_file(f"{directory}/base/adapter_model.safetensors")
    last = load_file(delta_path(directory, 2))
    trained = get_peft_model_state_dict(trainer.model)
    assert set(last) == set(base) == set(trained) and len(base) == 2 * 2 * 30  # A and B of q and v, 30 layers
    for name, value in trained.items():
        torch.testing.assert_close(base[name] + last[name], value.float(), rtol=0, atol=1e-6)
    assert any(last[n].abs().max() > 0 for n in last if "lora_B" in n), "the adapter did not move: the test is void"
