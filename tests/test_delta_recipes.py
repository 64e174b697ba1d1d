"""The paper-scale DelTA recipe: the authors' released settings (RUCBM/DelTA recipe/dapo/srcs/run_DelTA.sh) and batch
arithmetic, every key a field of the script's dataclasses, and two steps through the GRPO script on the tiny model with
the recipe's DelTA and loss settings. (The toy recipe's run: tests/test_delta_trainer.py.)"""

from pathlib import Path

import pytest
import yaml
from test_acpo_recipes import FAST, parse

from trl_rlvr_ext.scripts import grpo as grpo_script
from trl_rlvr_ext.scripts import launch


RECIPE = (
    Path(__file__).resolve().parents[1] / "trl_rlvr_ext" / "recipes" / "grpo" / "qwen2.5-math-1.5b_dapo_delta.yaml"
)
RELEASED = {  # run_DelTA.sh: delta_K, delta_lam_min / max; clip_ratio_low / high / c; loss_agg_mode token-mean
    "token_credit": "delta",
    "token_credit_w_lo": 0.8,
    "token_credit_w_hi": 1.2,
    "token_credit_refine_steps": 1,
    "loss_type": "dapo",
    "epsilon": 0.2,
    "epsilon_high": 0.28,
    "delta": 10.0,
    "beta": 0.0,
    "learning_rate": 1e-6,
    "weight_decay": 0.1,
    "max_grad_norm": 1.0,
    "num_generations": 16,
    "temperature": 1.0,
    "num_train_epochs": 2,
}
# run 2 steps on this machine: no GPU (bf16, vLLM off), the tiny model, a dense reward, short completions
CPU = ["--bf16", "false", "--use_cpu", "true", "--use_vllm", "false", "--dtype", "float32"]
CPU += ["--activation_checkpointing", "false", "--max_completion_length", "8", "--report_to", "none"]


def test_paper_delta_recipe_has_the_released_settings():
    recipe = yaml.safe_load(RECIPE.read_text())
    assert {k: recipe[k] for k in RELEASED} == RELEASED
    assert recipe["off_policy_diagnostics"] is True and recipe["importance_sampling_level"] == "token"
    assert recipe["max_completion_length"] == 3072  # Qwen2.5-Math's 4096-token context (the script: 20480)
    # the script's batch: 128 prompts x 16 responses per rollout, mini-batches of 32 prompts: 4 updates per rollout
    per_device, accumulation = recipe["per_device_train_batch_size"], recipe["gradient_accumulation_steps"]
    rollout = per_device * 8 * recipe["steps_per_generation"]
    assert rollout // recipe["num_generations"] == 128
    assert per_device * 8 * accumulation // recipe["num_generations"] == 32
    assert recipe["steps_per_generation"] // accumulation == 4
    assert "verl-DelTA/recipe/dapo/srcs/run_DelTA.sh" in RECIPE.read_text()
    _, training_args, model_args, _ = parse(["--config", str(RECIPE), "--bf16", "false", "--use_vllm", "false"])
    assert training_args.token_credit == "delta" and model_args.model_name_or_path == "Qwen/Qwen2.5-Math-1.5B"


def test_paper_delta_recipe_trains_two_steps_on_the_tiny_model(tiny_model_path, tmp_path):
    argv = ["--config", str(RECIPE), "--model_name_or_path", tiny_model_path, "--output_dir", str(tmp_path)]
    argv += ["--dataset_name", "toy:arithmetic", "--reward_funcs", "grpo_helpers.digit_reward", *FAST, *CPU]
    argv += ["--gradient_accumulation_steps", "1", "--steps_per_generation", "2", "--learning_rate", "0.01"]
    trainer = grpo_script.main(*launch.parse(grpo_script.COMMAND, argv))  # the CLI's parsing, then its training
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2 and logs[0]["token_credit/weight_std"] > 0
    assert logs[0]["token_credit/weight_mean"] == pytest.approx(1.0, rel=1e-5)
    assert "off_policy/ratio_p50" in logs[1]  # the recipe's diagnostics, on the reused rollout
