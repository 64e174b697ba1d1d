"""An extrapolated arm (`studies.design.Extrapolation`): RELEX fits the trajectory its source arm's same-seed run
recorded, and the arm evaluates the extrapolated checkpoint. On the tiny model (``study pretrained --quick``)."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from lab.cli import main
from lab.studies import get_study
from lab.studies.design import Arm, Extrapolation
from lab.studies.extrapolated import extrapolated_model, trajectory_dir
from lab.studies.pretrained_study import RELEX_HISTORY, RELEX_SOURCE, RELEX_TARGET
from trl_rlvr_ext.extrapolation import relex_extrapolate
from trl_rlvr_ext.extrapolation.trajectory import delta_path


def test_an_extrapolation_and_its_arm_are_checked():
    with pytest.raises(ValueError, match="history_steps must be an integer >= 1"):
        Extrapolation("src", 0, 16)
    with pytest.raises(ValueError, match="needs >= 2"):
        Extrapolation("src", 1, 16)
    with pytest.raises(ValueError, match="rank must be an integer"):
        Extrapolation("src", 8, 16, rank=True)
    with pytest.raises(ValueError, match="it trains nothing. Set train=False"):
        Arm("relex", extrapolate=Extrapolation("src", 8, 16))
    arm = Arm("relex", train=False, extrapolate=Extrapolation("src", 8, 16))
    assert arm.depends_on == "src" and Arm("x", same_prompts_as="y").depends_on == "y" and Arm("z").depends_on == ""


def test_the_pretrained_relex_arms_are_declared():
    study = get_study("pretrained")
    source, relex = study.arms[RELEX_SOURCE], study.arms["relex"]
    assert source.config == {"max_steps": RELEX_HISTORY, "relex_record_steps": 1}
    assert source.peft == study.arms["lora"].peft  # stock GRPO + LoRA, stopped at the history's end
    assert relex.extrapolate == Extrapolation(RELEX_SOURCE, RELEX_HISTORY, RELEX_TARGET, rank=1)
    assert RELEX_TARGET == study.sizes.max_steps == 2 * RELEX_HISTORY


def _quick(out, arms):
    return main(
        ["study", "pretrained", "--quick", "--arms", arms, "--seeds", "0", "--workers", "1", "--out_dir", str(out)]
    )


def test_an_extrapolated_arm_before_its_source_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")
    with pytest.raises(ValueError, match=f"needs the same-seed run of '{RELEX_SOURCE}': list '{RELEX_SOURCE}' before"):
        _quick(tmp_path, f"relex,{RELEX_SOURCE}")


def test_the_arm_evaluates_relex_on_its_source_trajectory(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")
    out = tmp_path / "out"
    assert _quick(out, f"{RELEX_SOURCE},relex") == 0
    result = json.loads((out / "products" / "relex" / "seed0" / "result.json").read_text())
    record = result["extrapolation"]
    assert record["source"] == RELEX_SOURCE and record["kind"] == "adapter"
    assert record["recorded_steps"] == record["report"]["history"] == list(range(1, RELEX_HISTORY + 1))
    # step 16 on the fit axis of 8 history rows at positions 0..7: position 7 + (16 - 8)
    assert record["report"]["fit_positions"] == {str(RELEX_TARGET): RELEX_HISTORY - 1 + RELEX_TARGET - RELEX_HISTORY}
    assert result["grpo_config"] is None and result["train_seconds"] == 0

    # the written adapter is θ_0 + the pure function's extrapolation of the recorded deltas, tensor by tensor
    trajectory = trajectory_dir(out, "products", RELEX_SOURCE, 0)
    history = record["recorded_steps"]
    theta_0 = load_file(str(trajectory / "base" / "adapter_model.safetensors"))
    steps = [load_file(delta_path(str(trajectory), s)) for s in history]
    checkpoint = out / "products" / "relex" / "seed0" / "relex" / f"step{RELEX_TARGET}"
    written = load_file(str(checkpoint / "adapter_model.safetensors"))
    assert sorted(written) == sorted(theta_0)
    for name in sorted(theta_0)[:4]:
        deltas = torch.stack([step[name].float().reshape(-1) for step in steps])
        predicted, _ = relex_extrapolate(deltas, history, [RELEX_TARGET], rank=1)
        expected = (theta_0[name].reshape(-1).float() + predicted[RELEX_TARGET]).to(theta_0[name].dtype)
        assert torch.equal(written[name].reshape(-1), expected), name

    # the model the arm evaluates carries those weights
    study = get_study("pretrained")
    task, arm = study.tasks["products"], study.arms["relex"]
    from lab.studies.pretrained_study import base_model

    model, _, _ = extrapolated_model(out, task, arm, 0, base_model(True), tmp_path / "again")
    loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
    key = next(n for n in loaded if n.replace(".default", "").endswith(name.removeprefix("base_model.model.")))
    torch.testing.assert_close(loaded[key].detach().reshape(-1), written[name].reshape(-1))

    # a source restored from records has no trajectory: the error names the fix
    shutil.rmtree(trajectory)
    with pytest.raises(ValueError, match="delete that result.json and run the source arm again"):
        extrapolated_model(out, task, arm, 0, base_model(True), tmp_path / "third")


def test_the_trajectory_is_where_the_source_arms_config_put_it(tmp_path):
    """A source arm that names its own ``relex_trajectory_dir`` is read there; without one, at the config's default
    under the run's trainer folder."""
    default = trajectory_dir(tmp_path, "products", RELEX_SOURCE, 3)
    assert default == tmp_path / "products" / RELEX_SOURCE / "seed3" / "train" / "relex_trajectory"
    assert trajectory_dir(tmp_path, "products", RELEX_SOURCE, 3, {"max_steps": 8}) == default
    moved = tmp_path / "elsewhere"
    assert trajectory_dir(tmp_path, "products", RELEX_SOURCE, 3, {"relex_trajectory_dir": str(moved)}) == moved
