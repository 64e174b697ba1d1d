"""``trl-rlvr-ext relex`` on trajectories recorded on the tiny model: the written folders load (model and adapter),
``eval`` takes them, the fit streams one tensor at a time, and bad requests fail clearly."""

import json

import pytest
import torch
from safetensors.torch import load_file
from test_grpo_trainer import _train
from transformers import AutoModelForCausalLM

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer, cli
from trl_rlvr_ext.extrapolation.relex import relex_extrapolate
from trl_rlvr_ext.extrapolation.trajectory import delta_path


@pytest.fixture(scope="module")
def trajectory(tiny_model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("relex_run")
    _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, out, relex_record_steps=1, relex_record_dtype="float32")
    return out / "relex_trajectory"


def test_extrapolated_folder_is_theta0_plus_the_fit(trajectory, tmp_path, capsys):
    out = tmp_path / "relex"
    argv = ["relex", "--trajectory", str(trajectory), "--history_steps", "3", "--target_steps", "6,10"]
    assert cli.main([*argv, "--output_dir", str(out), "--no_progress"]) == 0
    assert "relex/explained_mean=" in capsys.readouterr().out
    report = json.loads((out / "variance_report_h3_r1.json").read_text())
    assert report["history"] == [1, 2, 3] and report["fit_positions"] == {"6": 5.0, "10": 9.0}
    base = load_file(trajectory / "base" / "model.safetensors")
    predicted = load_file(out / "step10" / "model.safetensors")
    assert set(predicted) == set(base)
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight"):
        rows = torch.stack([load_file(delta_path(str(trajectory), s))[name].reshape(-1) for s in (1, 2, 3)])
        expected, _ = relex_extrapolate(rows, [1, 2, 3], [10])
        torch.testing.assert_close(predicted[name], base[name] + expected[10].reshape(base[name].shape))
    # memory: the largest matrix held is one tensor's history (T x d), far below the model's
    largest = max(t.numel() for t in base.values())
    assert report["peak_history_elements"] == 3 * largest < 3 * sum(t.numel() for t in base.values()) / 2
    model = AutoModelForCausalLM.from_pretrained(out / "step10")
    assert torch.equal(model.state_dict()["model.norm.weight"], predicted["model.norm.weight"])
    assert report["summary"]["relex/tensors"] == len(base) and 0 <= report["summary"]["relex/explained_min"] <= 1


def test_reconstruct_of_a_history_step_matches_and_bad_requests_fail(trajectory, tmp_path, capsys):
    out = tmp_path / "rec"
    argv = ["relex", "--trajectory", str(trajectory), "--history_steps", "4", "--output_dir", str(out)]
    assert cli.main([*argv, "--target_steps", "4", "--mode", "reconstruct", "--rank", "4", "--no_progress"]) == 0
    base = load_file(trajectory / "base" / "model.safetensors")
    delta = load_file(delta_path(str(trajectory), 4))
    got = load_file(out / "step4" / "model.safetensors")
    for name in base:  # rank 4 = T: the projection is exact
        torch.testing.assert_close(got[name], base[name] + delta[name], rtol=1e-4, atol=1e-5)
    capsys.readouterr()
    assert cli.main([*argv, "--target_steps", "9", "--mode", "reconstruct"]) == 2
    assert "[9] are not among" in capsys.readouterr().err
    assert cli.main([*argv, "--target_steps", "9", "--mode", "reconstruct", "--step_scaling", "2"]) == 2
    assert "extrapolate mode only" in capsys.readouterr().err
    assert (
        cli.main(
            [
                "relex",
                "--trajectory",
                str(tmp_path),
                "--history_steps",
                "3",
                "--target_steps",
                "5",
                "--output_dir",
                str(out),
            ]
        )
        == 2
    )
    assert "is not a RELEX trajectory" in capsys.readouterr().err


def test_eval_takes_the_output(trajectory, tmp_path):
    out = tmp_path / "relex"
    argv = ["relex", "--trajectory", str(trajectory), "--history_steps", "4", "--target_steps", "8"]
    assert cli.main([*argv, "--output_dir", str(out), "--no_progress"]) == 0
    code = cli.main(
        [
            "eval",
            "--model",
            str(out / "step8"),
            "--dataset",
            "toy:arithmetic",
            "--split",
            "test",
            "--reward_funcs",
            "toy_accuracy",
            "--num_samples",
            "2",
            "--max_new_tokens",
            "4",
            "--num_problems",
            "4",
            "--output_dir",
            str(tmp_path / "eval"),
            "--no_plot",
            "--confidence_level",
            "0",
        ]
    )
    assert code == 0 and (tmp_path / "eval" / "pass_at_k.json").is_file()


def test_an_adapter_trajectory_gives_adapter_folders(tiny_model_path, tmp_path):
    from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
    from peft import LoraConfig, PeftModel

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=1, max_steps=3, learning_rate=1e-2))
    RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    ).train()
    out = tmp_path / "relex"
    argv = ["relex", "--trajectory", str(tmp_path / "relex_trajectory"), "--history_steps", "3"]
    assert cli.main([*argv, "--target_steps", "9", "--output_dir", str(out), "--no_progress"]) == 0
    assert (out / "step9" / "adapter_config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model = PeftModel.from_pretrained(model, out / "step9")
    written = load_file(out / "step9" / "adapter_model.safetensors")
    assert any("lora_B" in n and v.abs().max() > 0 for n, v in written.items())


def test_toy_relex_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    from test_acpo_recipes import FAST, ROOT, parse

    from trl_rlvr_ext.scripts import grpo as grpo_script

    argv = ["--config", str(ROOT / "recipes/grpo/toy_relex.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST, "--reward_funcs", "grpo_helpers.digit_reward"]
    script_args, training_args, model_args, dataset_args = parse(argv)
    assert (training_args.relex_record_steps, training_args.relex_record_dtype) == (1, "float16")
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert [log["relex/recorded_steps"] for log in logs] == [1.0, 2.0]
    assert (tmp_path / "relex_trajectory" / "manifest.json").is_file()
