"""The GRPO script, the CLI and the recipes: parsing, offline toy runs, and clear errors for bad input."""

from pathlib import Path

import pytest
import yaml
from datasets import Dataset

from trl_rlvr_ext import cli
from trl_rlvr_ext.rewards import REWARD_NAMES, get_reward_func
from trl_rlvr_ext.scripts import grpo as grpo_script
from trl_rlvr_ext.scripts.recipes import resolve_accelerate_config


ROOT = Path(__file__).resolve().parents[1]
FAST = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]


def _parse(argv):
    return grpo_script.make_parser().parse_args_and_config(args=argv, fail_with_unknown_args=True)


def test_toy_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    """The offline toy recipe parses (YAML + CLI overrides) and trains for a couple of steps."""
    argv = ["--config", str(ROOT / "recipes/grpo/toy_nsr.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST]
    script_args, training_args, model_args, dataset_args = _parse(argv)
    assert training_args.clip_recovery == "nsr" and training_args.loss_type == "dapo"
    assert training_args.epsilon_high == 0.28
    assert training_args.steps_per_generation > training_args.gradient_accumulation_steps  # the clip can bite
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2 and "clip_recovery/high_frac" in logs[0]
    assert (tmp_path / "model.safetensors").is_file()


def test_cli_grpo_subcommand(tiny_model_path, tmp_path):
    argv = ["grpo", "--config", str(ROOT / "recipes/grpo/toy_nsr.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST, "--max_steps", "1"]
    assert cli.main(argv) == 0
    assert (tmp_path / "config.json").is_file()


def test_cli_usage_and_unknown_command(capsys):
    assert cli.main([]) == 0
    assert "grpo" in capsys.readouterr().out
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err


def test_cli_resolves_accelerate_configs():
    assert resolve_accelerate_config("zero3").endswith("zero3.yaml")
    path = str(ROOT / "recipes/accelerate_configs/deepspeed_zero3.yaml")
    assert resolve_accelerate_config(path) == path
    with pytest.raises(SystemExit, match="neither a file nor a packaged config"):
        resolve_accelerate_config("zero9")


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_recipe_is_valid_yaml(recipe):
    assert isinstance(yaml.safe_load(recipe.read_text()), dict)


def test_real_grpo_recipe_parses_with_paper_settings():
    script_args, training_args, model_args, _ = _parse(
        [
            "--config",
            str(ROOT / "recipes/grpo/qwen2.5-math-1.5b_dapo_nsr.yaml"),
            "--use_vllm",
            "false",
            "--bf16",
            "false",
        ]
    )
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-Math-1.5B"
    assert (training_args.epsilon, training_args.epsilon_high) == (0.2, 0.28)
    assert training_args.clip_recovery == "nsr" and script_args.reward_funcs == ["math_accuracy"]
    assert training_args.steps_per_generation > training_args.gradient_accumulation_steps  # the clip can bite


def test_unknown_reward_name_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown reward function 'nope'"):
        get_reward_func("nope")
    with pytest.raises(ValueError, match="Cannot import module"):
        get_reward_func("no_such_package.reward")
    for name in REWARD_NAMES:
        assert callable(get_reward_func(name))


def test_dotted_reward_path_resolves():
    assert get_reward_func("trl_rlvr_ext.rewards.toy.toy_accuracy_reward").__name__ == "toy_accuracy_reward"


def test_dataset_without_prompt_column_is_a_clear_error(tiny_model_path, tmp_path):
    data = tmp_path / "data.jsonl"
    Dataset.from_dict({"question": ["1+1="], "answer": ["2"]}).to_json(data)
    argv = ["--model_name_or_path", tiny_model_path, "--dataset_name", str(data), "--output_dir", str(tmp_path)]
    argv += ["--use_cpu", "true", "--report_to", "none", "--reward_funcs", "toy_accuracy"]
    with pytest.raises(ValueError, match=r"has no column\(s\) \['prompt'\]"):
        grpo_script.build_trainer(*_parse(argv))


def test_nsr_with_a_loss_without_clip_is_a_clear_error(tiny_model_path, tmp_path):
    argv = ["--config", str(ROOT / "recipes/grpo/toy_nsr.yaml"), "--loss_type", "cispo", "--output_dir", str(tmp_path)]
    with pytest.raises(ValueError, match="loss_type='cispo' has none to recover from"):
        _parse(argv)


def test_math_accuracy_reward():
    reward = get_reward_func("math_accuracy")
    completions = [
        "so \\boxed{72}",
        "so \\boxed{71}",
        "72 without a box",
        [{"role": "assistant", "content": "\\boxed{72}"}],
    ]
    assert reward(completions, answer=["72"] * 4) == [1.0, 0.0, 0.0, 1.0]
    assert reward(["\\boxed{\\frac{1}{3}}"], solution=["$\\frac{1}{3}$"]) == [1.0]
    with pytest.raises(ValueError, match="'answer' or 'solution'"):
        reward(["\\boxed{1}"])


@pytest.mark.slow
def test_accelerate_launch_with_the_cpu_config(tiny_model_path, tmp_path):
    """`accelerate launch --config_file recipes/accelerate_configs/cpu.yaml -m trl_rlvr_ext.scripts.grpo ...`."""
    import os
    import subprocess
    import sys

    command = [
        str(Path(sys.executable).parent / "accelerate"), "launch",
        "--config_file", str(ROOT / "recipes/accelerate_configs/cpu.yaml"),
        "-m", "trl_rlvr_ext.scripts.grpo", "--config", str(ROOT / "recipes/grpo/toy_nsr.yaml"),
        "--model_name_or_path", tiny_model_path, "--output_dir", str(tmp_path / "run"), *FAST, "--max_steps", "1",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Model saved to" in result.stdout and (tmp_path / "run" / "config.json").exists()


def test_toy_dynamic_sampling_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    """The offline dynamic sampling recipe parses and trains through the GRPO script; on the random tiny model every
    group is all-wrong, so each batch takes the recipe's full round bound and says so."""
    argv = ["--config", str(ROOT / "recipes/grpo/toy_dynamic_sampling.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST, "--dynamic_sampling_max_rounds", "2"]
    script_args, training_args, model_args, dataset_args = _parse(argv)
    assert training_args.dynamic_sampling and training_args.dynamic_sampling_reward_func == "toy_accuracy_reward"
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2
    generated = [log for log in logs if "dynamic_sampling/rounds" in log]  # 4 optimiser steps per generation batch
    assert generated
    for log in generated:
        assert log["dynamic_sampling/rounds"] == 2 and log["dynamic_sampling/bound_hit"] == 1
    assert (tmp_path / "model.safetensors").is_file()


def test_real_dynamic_sampling_recipe_parses_with_paper_settings():
    script_args, training_args, model_args, _ = _parse(
        [
            "--config",
            str(ROOT / "recipes/grpo/qwen2.5-math-1.5b_dapo_dynamic_sampling.yaml"),
            "--use_vllm",
            "false",
            "--bf16",
            "false",
        ]
    )
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-Math-1.5B"
    assert training_args.dynamic_sampling and training_args.dynamic_sampling_max_rounds == 10
    assert training_args.dynamic_sampling_reward_func == "math_accuracy_reward"
    assert script_args.reward_funcs == ["math_accuracy"]
    assert (training_args.epsilon, training_args.epsilon_high, training_args.num_generations) == (0.2, 0.28, 16)
    assert training_args.learning_rate == 1e-6 and training_args.scale_rewards == "group"
    # whole groups on each of 8 GPUs: 16 x 8 completions per process per rollout
    per_process = training_args.per_device_train_batch_size * training_args.steps_per_generation
    assert per_process % training_args.num_generations == 0


def test_toy_vllm_lora_recipe_parses_with_the_adapter_sync():
    """The vLLM LoRA recipe turns the adapter sync on (tests/test_vllm_cpu.py runs it through vLLM)."""
    _, training_args, model_args, _ = _parse(["--config", str(ROOT / "recipes/grpo/toy_nsr_vllm_lora.yaml")])
    assert training_args.use_vllm and training_args.vllm_sync == "adapter" and training_args.vllm_mode == "colocate"
    assert model_args.use_peft and model_args.lora_target_modules == "all-linear"
