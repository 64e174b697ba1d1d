"""The method authors' kit (`trl_rlvr_ext.testing`) on its own: each check passes a correct method and fails a wrong
one with a message that says what differs. (The built-in methods' tests call the kit too: the stock checks in
test_grpo_trainer.py and the per-method trainer tests, the sharding checks in test_sharding.py, the resume checks in
test_hard_kill.py.)"""

import dataclasses
import json

import pytest
import torch

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.losses import nsr_expected_weight, nsr_rescue_probability
from trl_rlvr_ext.testing import assert_matches_reference, assert_stock_when_off
from trl_rlvr_ext.testing.resume import resume_problems
from trl_rlvr_ext.testing.runs import import_path
from trl_rlvr_ext.testing.sharded import case_problems, sharding_problems


# ---------------------------------------------------------------- a user's method, defined outside the package
@dataclasses.dataclass
class ScaledLossConfig(RLVRGRPOConfig):
    """A user's config: one field of their own, off at 1.0."""

    loss_scale: float = dataclasses.field(default=1.0, metadata={"help": "Multiplies the loss; 1.0 is off."})


class ScaledLossTrainer(RLVRGRPOTrainer):
    """Correct: off, it calls nothing of its own."""

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        return loss if self.args.loss_scale == 1.0 else loss * self.args.loss_scale


class LeakyScaledLossTrainer(RLVRGRPOTrainer):
    """Wrong: off, it still perturbs the loss (by one part in a thousand)."""

    def _compute_loss(self, model, inputs):
        return super()._compute_loss(model, inputs) * (self.args.loss_scale + 1e-3)


SHORT = {"max_steps": 2}


def test_stock_check_passes_a_user_method_that_is_off(tiny_model_path, tmp_path):
    runs = assert_stock_when_off(
        {"loss_scale": 1.0},
        config_cls=ScaledLossConfig,
        trainer_cls=ScaledLossTrainer,
        model=tiny_model_path,
        output_dir=tmp_path,
        training_args=SHORT,
    )
    assert type(runs.ours.trainer) is ScaledLossTrainer and runs.ours.trainer.args.loss_scale == 1.0


def test_stock_check_fails_a_method_that_acts_when_off(tiny_model_path, tmp_path):
    with pytest.raises(
        AssertionError, match=r"the run differs from stock TRL's:\n- logged values: step 1: .*step 1: loss = "
    ) as e:
        assert_stock_when_off(
            {"loss_scale": 1.0},
            config_cls=ScaledLossConfig,
            trainer_cls=LeakyScaledLossTrainer,
            model=tiny_model_path,
            output_dir=tmp_path,
            training_args=SHORT,
        )
    assert "- parameters: parameter model." in str(
        e.value
    ) and "- checkpoint: checkpoint file model.safetensors" in str(e.value)


def test_stock_check_refuses_a_void_comparison(tiny_model_path, tmp_path):
    with pytest.raises(AssertionError, match="TRL's clip never bound in the stock run"):
        assert_stock_when_off(
            model=tiny_model_path, output_dir=tmp_path, checkpoint=False, training_args={"max_steps": 1}
        )


# ---------------------------------------------------------------- a pure function against a reference
def _rescue_reference(ratio, epsilon_low, epsilon_high, side):
    """NSR's rescue probability written from the equation, one element at a time: min(1, (1+ε_h)/r) above the clip,
    min(1, r/(1−ε_l)) below it."""
    values = [
        min(1.0, (1.0 + epsilon_high) / r) if side == "high" else min(1.0, r / (1.0 - epsilon_low))
        for r in ratio.tolist()
    ]
    return torch.tensor(values, dtype=ratio.dtype)


CASES = [
    {"ratio": torch.tensor([0.5, 0.79, 1.0, 1.3, 2.0], dtype=torch.float64), "epsilon_low": 0.2, "epsilon_high": 0.28}
    | {"side": side}
    for side in ("high", "low")
]


def test_reference_check_passes_a_matching_function():
    assert_matches_reference(nsr_rescue_probability, _rescue_reference, CASES)
    assert_matches_reference(
        lambda x: x.sum(), lambda x: x.sum(dtype=torch.float64).float(), [(torch.rand(8),)], atol=1e-6
    )


def test_reference_check_fails_and_says_where():
    with pytest.raises(AssertionError) as e:
        assert_matches_reference(nsr_expected_weight, _rescue_reference, CASES)
    message = str(e.value)
    assert "nsr_expected_weight does not match _rescue_reference exactly on case 0" in message
    assert "side='high'" in message and "max |got - want| = " in message and "at index (0,)" in message
    # one ulp is a failure when exact, and passes within a tolerance
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    with pytest.raises(AssertionError, match=r"at index \(1,\)"):
        assert_matches_reference(
            lambda v: v * 3.0, lambda v: (v * 3.0).nextafter(torch.tensor(10.0, dtype=v.dtype)), [(x,)]
        )
    assert_matches_reference(
        lambda v: v * 3.0, lambda v: (v * 3.0).nextafter(torch.tensor(10.0, dtype=v.dtype)), [(x,)], rtol=1e-12
    )
    with pytest.raises(ValueError, match="at least one case"):
        assert_matches_reference(abs, abs, [])


# ---------------------------------------------------------------- the sharded check's verdicts (the launches: test_sharding.py)
def _record(logs, digest="d", sharding=None, abs_sum=10.0):
    return {"world_size": 2, "logs": logs, "param_digest": digest, "param_abs_sum": abs_sum, "sharding": sharding}


DDP = {"wrapped": "DistributedDataParallel", "fsdp_module": False, "all_dtensor": False}
ZERO3 = {"wrapped": "DeepSpeedEngine", "zero_stage": 3, "ds_shape": [8, 4], "ds_local_numel": 16, "ds_numel": 32}


def test_sharded_check_fails_when_not_sharded_or_not_equal():
    logs = [{"loss": 0.5, "step": 1}]
    ddp = [_record(logs, sharding=DDP)] * 2
    assert case_problems("zero3", [_record(logs, sharding=ZERO3)] * 2, ddp, 1e-5, 1e-6) == []
    unsharded = dict(ZERO3, ds_local_numel=32)  # every rank holds the whole weight: not ZeRO-3's partition
    assert sharding_problems("zero3", unsharded) == [f"ZeRO-3 did not partition the weights in two: {unsharded}"]
    assert sharding_problems("fsdp2", DDP)[0].startswith("FSDP2 did not shard every parameter")
    drifted = [_record([{"loss": 0.5001, "step": 1}], sharding=ZERO3, abs_sum=10.1)] * 2
    assert case_problems("zero3", drifted, ddp, 1e-5, 1e-6) == [
        "zero3 vs ddp step 1 loss: 0.5001 vs 0.5",
        "zero3 vs ddp: sum of |parameters| 10.1 vs 10.0 (rtol 1e-06)",
    ]
    split = [_record(logs, "a", ZERO3), _record(logs, "b", ZERO3)]
    assert case_problems("zero3", split, ddp, 1e-5, 1e-6) == [
        "zero3: the two ranks ended with different parameters or logs"
    ]


# ---------------------------------------------------------------- the resume check's verdict (the runs: test_hard_kill.py)
def _checkpoint(folder, weights: bytes, state: str, loss: float):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "my_method_state.json").write_text(state)
    history = [{"step": 3, "loss": loss, "step_time": 0.1}]
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))


def test_resume_check_fails_on_any_difference(tmp_path):
    _checkpoint(tmp_path / "full", b"w", '{"n": 3}', 0.25)
    _checkpoint(tmp_path / "same", b"w", '{"n": 3}', 0.25)
    assert resume_problems(tmp_path / "full", tmp_path / "same", [3]) == []
    _checkpoint(tmp_path / "lost", b"w", '{"n": 1}', 0.5)  # the method's state restarted on resume
    assert resume_problems(tmp_path / "full", tmp_path / "lost", [3]) == [
        "checkpoint file my_method_state.json differs from the uninterrupted run's",
        "step 3 logged {'step': 3, 'loss': 0.5} instead of {'step': 3, 'loss': 0.25}",
    ]


def test_the_launched_checks_need_importable_objects():
    assert import_path(ScaledLossTrainer) == "test_testing_kit:ScaledLossTrainer"
    with pytest.raises(ValueError, match="cannot be imported by the launched processes"):
        import_path(lambda completions, **kwargs: [0.0] * len(completions))
