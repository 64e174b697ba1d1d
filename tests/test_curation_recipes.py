"""The curation recipes: the toy one trains a couple of steps through the GRPO script; the paper one parses."""

from pathlib import Path

import yaml

from trl_rlvr_ext.scripts import grpo as grpo_script


ROOT = Path(__file__).resolve().parents[1]
FAST = ["--max_steps", "2", "--per_device_train_batch_size", "16", "--num_generations", "4", "--logging_steps", "1"]


def parse(argv):
    return grpo_script.make_parser().parse_args_and_config(args=argv, fail_with_unknown_args=True)


def test_toy_self_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    argv = ["--config", str(ROOT / "recipes/curation/toy_self.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST]
    script_args, training_args, model_args, dataset_args = parse(argv)
    assert training_args.curation == "self" and training_args.curation_id_column == "idx"
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2
    assert {"curation/greedy_solved_frac", "curation/kept_prompts", "curation/skipped_steps"} <= set(logs[0])
    assert (tmp_path / "model.safetensors").is_file()


def test_paper_recipe_has_the_paper_settings():
    path = ROOT / "recipes/curation/qwen2.5-math-1.5b_self.yaml"
    recipe = yaml.safe_load(path.read_text())
    assert recipe["model_name_or_path"] == "Qwen/Qwen2.5-Math-1.5B" and recipe["curation"] == "self"
    assert recipe["learning_rate"] == 1e-6 and recipe["beta"] == 0.0
    assert recipe["epsilon"] == recipe["epsilon_high"] == 0.2 and recipe["num_generations"] == 8
    num_gpus = 8
    rollout = recipe["per_device_train_batch_size"] * num_gpus * recipe["steps_per_generation"]
    assert rollout // recipe["num_generations"] == 128  # prompts per step
    assert recipe["steps_per_generation"] // recipe["gradient_accumulation_steps"] == 2  # gradient steps per rollout
    # every key is a field of the script's dataclasses (bf16 / vLLM switched off: this machine has neither)
    _, training_args, model_args, _ = parse(["--config", str(path), "--bf16", "false", "--use_vllm", "false"])
    assert (
        training_args.curation_self_recheck_steps == 0  # the paper filters each drawn batch: no memory
        and model_args.model_name_or_path == recipe["model_name_or_path"]
    )
