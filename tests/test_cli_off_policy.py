"""`trl-rlvr-ext grpo` turns the off-policy diagnostics on for runs that reuse their rollouts, unless told otherwise;
the library default stays off (stock TRL)."""

from pathlib import Path

import pytest
import yaml

from trl_rlvr_ext import RLVRGRPOConfig
from trl_rlvr_ext.grpo.grpo_config import off_policy_diagnostics_apply
from trl_rlvr_ext.grpo.signal_check import reuses_rollouts
from trl_rlvr_ext.scripts import grpo as grpo_script
from trl_rlvr_ext.scripts import launch
from trl_rlvr_ext.scripts.recipes import packaged_recipes


CPU = ["--model_name_or_path", "toy:tiny", "--use_cpu", "true", "--bf16", "false"]
NOTICE = "off_policy_diagnostics on"


def parsed_flag(argv, capsys):
    training_args = launch.parse(grpo_script.COMMAND, [*CPU, *argv])[1]
    return training_args.off_policy_diagnostics, capsys.readouterr().out


def test_library_default_stays_off():
    assert RLVRGRPOConfig(output_dir="out", num_iterations=2, use_cpu=True, bf16=False).off_policy_diagnostics is False


@pytest.mark.parametrize("reuse", [["--num_iterations", "2"], ["--steps_per_generation", "4"]])
def test_reuse_run_turns_it_on_and_says_how_to_turn_it_off(capsys, reuse):
    on, out = parsed_flag(reuse, capsys)
    assert on is True
    (line,) = [line for line in out.splitlines() if NOTICE in line]
    assert "--off_policy_diagnostics false" in line


def test_no_reuse_leaves_it_off(capsys):
    # steps_per_generation == gradient_accumulation_steps: one update per rollout, the ratio is identically 1
    on, out = parsed_flag(["--gradient_accumulation_steps", "2", "--steps_per_generation", "2"], capsys)
    assert on is False and NOTICE not in out


@pytest.mark.parametrize("flag", [["--off_policy_diagnostics", "false"], ["--off_policy_diagnostics=false"]])
def test_explicit_false_is_respected(capsys, flag):
    on, out = parsed_flag(["--num_iterations", "2", *flag], capsys)
    assert on is False and NOTICE not in out


def test_explicit_false_in_a_recipe_is_respected(capsys, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"num_iterations": 2, "off_policy_diagnostics": False}))
    on, out = parsed_flag(["--config", str(recipe)], capsys)
    assert on is False and NOTICE not in out


def test_loss_without_the_hard_clip_leaves_it_off(capsys):
    # cispo has no two-sided clip to measure: turning it on would be refused by the config's own check
    on, out = parsed_flag(["--num_iterations", "2", "--loss_type", "cispo"], capsys)
    assert on is False and NOTICE not in out


def test_every_packaged_recipe_that_reuses_rollouts_sets_it():
    for recipe in packaged_recipes():
        if recipe.command != "grpo":
            continue
        keys = yaml.safe_load(Path(recipe.path).read_text())
        args = launch.parse(grpo_script.COMMAND, ["--config", recipe.name, *CPU[2:], "--use_vllm", "false"])[1]
        if reuses_rollouts(args) and off_policy_diagnostics_apply(args):
            assert keys.get("off_policy_diagnostics") is True, recipe.name
