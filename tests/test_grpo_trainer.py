"""RLVRGRPOTrainer: stock equivalence when off, exact mirror of TRL's loss path, and NSR training."""

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.testing import Run, assert_same_run, assert_stock_when_off, step_logs, train


_train, _step_logs = train, step_logs  # (trainer, params before, params after); the per-step logs


def _assert_same_run(stock, ours, stock_after, ours_after, exclude_prefix="clip_recovery/"):
    """The kit's `assert_same_run` on two runs' trainers and final parameters (``ours`` may add ``exclude_prefix``)."""
    assert_same_run(Run(stock, {}, stock_after), Run(ours, {}, ours_after), extra_metrics=(exclude_prefix,))


# Every method's switch at its off value (each is also its default): NSR, ACPO, the off-policy diagnostics, DelTA,
# RSI-S, POPO, POISE, SELF / pass-rate curation, dynamic sampling
EVERY_METHOD_OFF = {
    "clip_recovery": "none",
    "adaptive_clip": "none",
    "off_policy_diagnostics": False,
    "token_credit": "none",
    "rsi_selection": "none",
    "objective": "grpo",
    "value_baseline": "none",
    "curation": "none",
    "dynamic_sampling": False,
}


def test_clip_recovery_none_is_stock_grpo(tiny_model_path, tmp_path):
    """Every option off: the same losses, metrics, parameters and checkpoint as stock GRPOTrainer, to the bit (with
    num_iterations=2, so the ratio is not identically 1 and the clip is active)."""
    assert_stock_when_off(EVERY_METHOD_OFF, model=tiny_model_path, output_dir=tmp_path)


@pytest.mark.parametrize(
    "options",
    [
        {"loss_type": "dapo"},
        {"loss_type": "grpo", "importance_sampling_level": "sequence"},
        {"loss_type": "bnpo", "delta": 1.5, "top_entropy_quantile": 0.5},
        {"loss_type": "dr_grpo", "beta": 0.1, "off_policy_mask_threshold": 0.5},
        {"loss_type": "luspo", "importance_sampling_level": "sequence", "steps_per_generation": 2},
    ],
    ids=["dapo", "grpo-seq", "bnpo-delta-entropy", "drgrpo-beta-opsm", "luspo-seq-spg"],
)
def test_nsr_path_without_clipping_mirrors_trl_exactly(tiny_model_path, tmp_path, options):
    """Our copy of TRL's loss path is exact: with a trust region so wide that nothing is clipped, NSR has nothing to
    rescue and the run must equal stock TRL's (losses, every metric, parameters) with the same options. NSR still
    draws its noise at every loss computation, so this also proves the draws leave the global RNG (which samples the
    second generation batch at step 3) untouched."""
    wide = {"epsilon": 0.999, "epsilon_high": 1e6, **options}
    stock, _, stock_after = _train(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "stock", **wide)
    ours, _, ours_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "ours", clip_recovery="nsr", **wide
    )
    _assert_same_run(stock, ours, stock_after, ours_after)
    assert all(log["clip_recovery/high_frac"] == 0 == log["clip_recovery/low_frac"] for log in _step_logs(ours))


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"])
@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
def test_training_with_clip_recovery(tiny_model_path, tmp_path, loss_type, mode):
    trainer, before, after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path, clip_recovery=mode, loss_type=loss_type
    )
    logs = _step_logs(trainer)
    assert trainer.state.log_history[-1]["train_loss"] is not None
    for name, value in before.items():
        assert not torch.equal(value, after[name]), f"parameter {name} did not change"
    clipped = [log["clip_ratio/region_mean"] for log in logs]
    rescued = [log["clip_recovery/high_frac"] + log["clip_recovery/low_frac"] for log in logs]
    assert max(clipped) > 0, "clip never active: the test is void"
    assert max(rescued) > 0, "tokens were clipped but none was rescued"
    for log in logs:  # a token can only be rescued if it is clipped
        assert log["clip_recovery/high_frac"] <= log["clip_ratio/high_mean"] + 1e-9
        assert log["clip_recovery/low_frac"] <= log["clip_ratio/low_mean"] + 1e-9


def test_nsr_changes_the_update_when_tokens_are_clipped(tiny_model_path, tmp_path):
    """NSR is not a no-op: with clipping active, its parameters differ from stock's (the rescue adds gradient), and
    the kit's stock check, handed NSR on as if it were off, fails and says so."""
    with pytest.raises(AssertionError, match=r"differs from stock TRL's:\n") as failure:
        assert_stock_when_off({"clip_recovery": "nsr"}, model=tiny_model_path, output_dir=tmp_path, checkpoint=False)
    message = str(failure.value)
    assert "only stock logs [], only ours ['clip_recovery/high_frac'" in message
    assert "- parameters: parameter model." in message


def test_nsr_run_is_reproducible_and_resumes_with_the_same_draws(tiny_model_path, tmp_path):
    """Same seed, same run; and a run resumed from a checkpoint continues with the same rescue draws."""
    common = {"clip_recovery": "nsr", "max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    a, _, a_after = _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "a", **common)
    _b, _, b_after = _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "b", **common)
    assert all(torch.equal(a_after[n], b_after[n]) for n in a_after)
    assert (tmp_path / "a" / "checkpoint-2" / "clip_recovery_rng_state_0.pth").is_file()

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path / "a", **common))
    resumed = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))
    full = {log["step"]: log for log in _step_logs(a)}
    for log in _step_logs(resumed):
        assert log["clip_recovery/high_frac"] == full[log["step"]]["clip_recovery/high_frac"]
        assert log["clip_recovery/low_frac"] == full[log["step"]]["clip_recovery/low_frac"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"clip_recovery": "nsr", "loss_type": "cispo"}, "has none to recover from"),
        ({"clip_recovery": "nsr", "loss_type": "sapo"}, "has none to recover from"),
        ({"clip_recovery": "nsr", "loss_type": "vespo"}, "has none to recover from"),
        ({"clip_recovery": "soft"}, "clip_recovery='soft' is not supported"),
        ({"learning_rate": -1e-6}, "learning_rate must be >= 0, got -1e-06"),
        ({"per_device_train_batch_size": 0}, "per_device_train_batch_size must be a whole number >= 1, got 0"),
        ({"gradient_accumulation_steps": -2}, "gradient_accumulation_steps must be a whole number >= 1, got -2"),
    ],
)
def test_config_rejects_invalid_combinations(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **overrides)


def test_a_plain_grpo_config_runs_as_stock_grpo(tiny_model_path, tmp_path, caplog):
    """Changing only the trainer import works: a plain trl.GRPOConfig becomes an RLVRGRPOConfig with every field (as
    GRPOConfig resolved it) kept and our options off, said once in the log, and the run is stock TRL to the bit."""
    runs = []
    for trainer_cls in (GRPOTrainer, RLVRGRPOTrainer):
        args = GRPOConfig(**grpo_kwargs(tmp_path / trainer_cls.__name__, max_steps=2, steps_per_generation=2))
        with caplog.at_level("WARNING", logger="trl_rlvr_ext.config"):
            trainer = trainer_cls(
                model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
            )
        trainer.train()
        runs.append((trainer, args))
    (stock, _), (ours, plain_args) = runs
    assert type(ours.args) is RLVRGRPOConfig and ours.args is not plain_args
    assert ours.args.clip_recovery == "none" and ours.args.curation == "none" and not ours.args.dynamic_sampling
    ours_fields = ours.args.to_dict()
    assert {k: v for k, v in ours_fields.items() if k in plain_args.to_dict()} == plain_args.to_dict()
    messages = [r.getMessage() for r in caplog.records if r.name == "trl_rlvr_ext.config"]
    assert (
        len(messages) == 1 and "plain trl.GRPOConfig" in messages[0] and "all off: the run is stock TRL" in messages[0]
    )
    _assert_same_run(stock, ours, dict(stock.model.named_parameters()), dict(ours.model.named_parameters()))


def test_a_plain_config_with_an_impossible_value_is_refused(tiny_model_path, tmp_path):
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", learning_rate=-1e-6)
    with pytest.raises(ValueError, match="learning_rate must be >= 0"):
        RLVRGRPOTrainer(model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())


def test_trainer_refuses_other_configs_and_names_the_fix(tiny_model_path, tmp_path):
    from trl import DPOConfig

    class MyGRPOConfig(GRPOConfig):
        pass

    for args, message in (
        (DPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none"), "got trl.DPOConfig"),
        (
            MyGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none"),
            "derive from trl_rlvr_ext.RLVRGRPOConfig instead of trl.GRPOConfig",
        ),
    ):
        with pytest.raises(TypeError, match=message):
            RLVRGRPOTrainer(
                model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
            )


def test_default_output_dir_is_trls(tiny_model_path):
    """Without `args`, the run goes where stock TRL's would: "<model name>-GRPO" / "-DPO" (for a path or a model)."""
    from transformers import AutoModelForCausalLM

    from trl_rlvr_ext._compat import resolve_trainer_config

    class Recorded:  # a config class that only records its output_dir (a real default config wants a GPU for bf16)
        def __init__(self, output_dir):
            self.output_dir = output_dir

    name = tiny_model_path.rstrip("/").split("/")[-1]
    loaded = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    for model in (tiny_model_path, loaded):
        for suffix in ("GRPO", "DPO"):
            assert (
                resolve_trainer_config(None, Recorded, None, "T", model, suffix, "").output_dir == f"{name}-{suffix}"
            )
