"""The paper-scale POPO recipe: the authors' configuration (momo1443/colm2026-POPO configs/popo/default.yaml and
configs/trainer/default.yaml), every key a field of the script's dataclasses, and two steps through the GRPO script on
the tiny model with the recipe's POPO settings. (The toy recipe's run: tests/test_popo_trainer.py.)"""

from pathlib import Path

import yaml
from test_acpo_recipes import FAST, parse
from test_delta_recipes import CPU

from trl_rlvr_ext.losses import POPO_PAPER_SETTINGS
from trl_rlvr_ext.scripts import grpo as grpo_script
from trl_rlvr_ext.scripts import launch


RECIPE = Path(__file__).resolve().parents[1] / "trl_rlvr_ext" / "recipes" / "grpo" / "qwen2.5-math-1.5b_popo.yaml"
AUTHORS = {  # configs/popo/default.yaml and configs/trainer/default.yaml
    "num_generations": 8,
    "max_completion_length": 512,
    "temperature": 1.0,
    "num_iterations": 1,
    "beta": 0.0,
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 4,
    "learning_rate": 1e-6,
    "warmup_steps": 0.1,  # warmup_ratio 0.1: transformers 5 takes the fraction here
    "lr_scheduler_type": "cosine",
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
    "seed": 42,
}


def test_paper_popo_recipe_has_the_authors_settings():
    recipe = yaml.safe_load(RECIPE.read_text())
    assert {k: recipe[k] for k in AUTHORS} == AUTHORS
    assert recipe["objective"] == "popo"
    assert {name: recipe[f"popo_{name}"] for name in POPO_PAPER_SETTINGS} == POPO_PAPER_SETTINGS
    assert "colm2026-POPO" in RECIPE.read_text()
    _, training_args, model_args, _ = parse(["--config", str(RECIPE), "--bf16", "false", "--use_vllm", "false"])
    assert training_args.objective == "popo" and model_args.model_name_or_path == "Qwen/Qwen2.5-Math-1.5B"


def test_paper_popo_recipe_trains_two_steps_on_the_tiny_model(tiny_model_path, tmp_path):
    argv = ["--config", str(RECIPE), "--model_name_or_path", tiny_model_path, "--output_dir", str(tmp_path)]
    argv += ["--dataset_name", "toy:arithmetic", "--reward_funcs", "grpo_helpers.digit_reward", *FAST, *CPU]
    argv += ["--gradient_accumulation_steps", "1", "--learning_rate", "0.01", "--save_strategy", "no"]
    trainer = grpo_script.main(*launch.parse(grpo_script.COMMAND, argv))  # the CLI's parsing, then its training
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2 and all("popo/nll_loss" in log and "popo/sim_loss" in log for log in logs)
