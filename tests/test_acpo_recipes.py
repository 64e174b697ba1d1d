"""The ACPO recipes: the toy one trains two steps through the GRPO script with ACPO's clip binding; the paper one parses
with the authors' settings and batch arithmetic (both regimes)."""

from pathlib import Path

import yaml

from trl_rlvr_ext.scripts import grpo as grpo_script


ROOT = Path(__file__).resolve().parents[1] / "trl_rlvr_ext"
FAST = ["--max_steps", "2", "--per_device_train_batch_size", "16", "--num_generations", "4", "--logging_steps", "1"]
PAPER = {
    "adaptive_clip": "acpo",
    "adaptive_clip_alpha": 3.0,
    "adaptive_clip_base": 0.2,
    "adaptive_clip_min": 0.0,
    "adaptive_clip_max": 3.0,
    "adaptive_clip_num_bins": 5,
}


def parse(argv):
    return grpo_script.make_parser().parse_args_and_config(args=argv, fail_with_unknown_args=True)


def test_toy_acpo_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    # On the random tiny model the toy task's exact-match reward is 0 for every sample (no advantage, no update, the
    # ratio stays 1): a dense reward, lr 0.01 and temperature 0.05 move the ratios within one reuse, so ACPO binds.
    argv = ["--config", str(ROOT / "recipes/grpo/toy_acpo.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST, "--learning_rate", "0.01", "--temperature", "0.05"]
    argv += ["--reward_funcs", "grpo_helpers.digit_reward"]
    script_args, training_args, model_args, dataset_args = parse(argv)
    assert {k: getattr(training_args, k) for k in PAPER} == PAPER and training_args.loss_type == "grpo"
    assert training_args.steps_per_generation > training_args.gradient_accumulation_steps  # rollouts are reused
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2
    assert all(f"adaptive_clip/token_frac_bin{k}" in log for log in logs for k in range(5))
    assert any(key.startswith("adaptive_clip/bound_bin") for key in logs[1])
    assert logs[1]["adaptive_clip/clip_ratio_low"] + logs[1]["adaptive_clip/clip_ratio_high"] > 0, "clip never bound"
    assert (tmp_path / "model.safetensors").is_file()


def test_paper_acpo_recipe_has_the_authors_settings():
    path = ROOT / "recipes/grpo/qwen2.5-math-1.5b_dapo_acpo.yaml"
    recipe = yaml.safe_load(path.read_text())
    assert {k: recipe[k] for k in PAPER} == PAPER and recipe["adaptive_clip_scope"] == "micro_batch"
    assert recipe["loss_type"] == "grpo" and recipe["importance_sampling_level"] == "token"  # seq-mean-token-mean
    assert (recipe["epsilon"], recipe["epsilon_high"], recipe["delta"]) == (0.2, 0.3, 3.0)
    assert recipe["learning_rate"] == 1e-6 and recipe["beta"] == 0.0 and recipe["num_generations"] == 10
    assert recipe["max_completion_length"] == 3072

    def regime(per_device, accumulation, steps_per_generation, num_gpus=8):
        rollout = per_device * num_gpus * steps_per_generation
        return rollout // recipe["num_generations"], steps_per_generation // accumulation  # prompts, updates

    args = recipe["per_device_train_batch_size"], recipe["gradient_accumulation_steps"], recipe["steps_per_generation"]
    assert regime(*args) == (256, 16)  # off-policy: 256 prompts per rollout, 16 updates of 16 prompts
    assert regime(recipe["per_device_train_batch_size"], 8, 16) == (128, 2)  # the near on-policy override (header)
    assert "--gradient_accumulation_steps 8 --steps_per_generation 16" in path.read_text()
    # every key is a field of the script's dataclasses (bf16 / vLLM switched off: this machine has neither)
    _, training_args, model_args, _ = parse(["--config", str(path), "--bf16", "false", "--use_vllm", "false"])
    assert training_args.adaptive_clip == "acpo" and model_args.model_name_or_path == "Qwen/Qwen2.5-Math-1.5B"
