"""bf16 on a CPU (`use_cpu=True, bf16=True`): every method trains with bf16 weights under bf16 autocast, its own
maths (ratios, rescue draws, importance weights) stays in float32, and with the options off our trainers equal TRL's
in bf16 as they do in float32.

TRL's `bf16` defaults to True whenever fp16 is off, so most of the suite already runs under bf16 autocast with
float32 weights. These tests add the two other cases users run: bf16 *weights* (`model_init_kwargs={"dtype":
"bfloat16"}`, what the Qwen recipes do on a GPU) and plain float32 (`bf16=False`), and check which one ran.
"""

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset, small_grpo_kwargs
from trl import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer

import trl_rlvr_ext.dpo.dpo_trainer as dpo_trainer_module
import trl_rlvr_ext.grpo.methods.clip_objective as clip_objective_module
from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer, RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.losses import clip_recovery_objective, is_daa_weights
from trl_rlvr_ext.toy.preference import make_toy_preference_dataset


BF16_WEIGHTS = {"bf16": True, "model_init_kwargs": {"dtype": "bfloat16"}}
PRECISIONS = {
    "bf16_weights": BF16_WEIGHTS,
    "bf16_autocast": {"bf16": True},  # float32 weights, bf16 matmuls: TRL's default on a CPU with use_cpu=True
    "fp32": {"bf16": False},
}
TIMING_KEYS = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "step_time"}


def _check_precision(trainer, precision: str) -> None:
    """The run is in the precision the test claims: weights' dtype and accelerate's autocast."""
    dtype = next(trainer.model.parameters()).dtype
    assert dtype == (torch.bfloat16 if precision == "bf16_weights" else torch.float32), dtype
    assert trainer.accelerator.mixed_precision == ("no" if precision == "fp32" else "bf16")


def _params(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def _logs(trainer):
    return [{k: v for k, v in log.items() if k not in TIMING_KEYS} for log in trainer.state.log_history]


# ---------------------------------------------------------------- pure functions: float32 whatever the input dtype
@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
def test_clip_recovery_decides_and_weighs_in_float32_for_bf16_ratios(mode):
    """With a bf16 ratio, which tokens PPO clips is decided in bf16, as TRL's own clamp and `clip_ratio/*` decide it
    (the bound 1 + ε_h rounds to bf16 there); the rescue among them (u drawn in float32 from the generator, u·r ≤ 1+ε_h,
    the expected weights) and the rescued surrogate w·r·A are float32, computed from the ratio's float32 value."""
    g = torch.Generator().manual_seed(0)
    ratio = torch.exp(torch.randn(64, 32, generator=g) * 0.5).to(torch.bfloat16).requires_grad_(True)
    advantages = torch.randn(64, 1, generator=g).to(torch.bfloat16)
    objective, masks = clip_recovery_objective(
        ratio, advantages, 0.2, 0.28, mode=mode, generator=torch.Generator().manual_seed(7)
    )
    objective.sum().backward()
    clipped_high = (ratio > 1.28) & (advantages > 0)  # bf16 comparisons, as TRL's
    clipped_low = (ratio < 0.8) & (advantages < 0)
    assert torch.equal(masks["clipped_high"], clipped_high) and torch.equal(masks["clipped_low"], clipped_low)
    r, a = ratio.detach().float(), advantages.float()
    if mode == "nsr":
        u = torch.rand(ratio.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float32)
        rescued_high, rescued_low = clipped_high & (u * r <= 1.28), clipped_low & (u <= r / 0.8)
        weight = u
    else:
        rescued_high, rescued_low = clipped_high, clipped_low
        weight = torch.where(clipped_high, 1.28**2 / (2 * r**2), r**2 / (2 * 0.8**2))
    assert rescued_high.any() and rescued_low.any(), "nothing rescued: the test is void"
    assert torch.equal(masks["rescued_high"], rescued_high) and torch.equal(masks["rescued_low"], rescued_low)
    rescued = rescued_high | rescued_low
    assert objective.dtype == torch.float32
    assert torch.equal(objective[rescued], (weight * r * a)[rescued])
    assert torch.equal(ratio.grad.float()[rescued], (weight * a).expand_as(r)[rescued].to(torch.bfloat16).float())
    # Elsewhere TRL's PPO surrogate in the ratio's own dtype, exactly
    stock = torch.min(ratio.detach() * advantages, torch.clamp(ratio.detach(), 0.8, 1.28) * advantages)
    assert torch.equal(objective.detach()[~rescued], stock.float()[~rescued])


def test_nsr_draws_in_bf16_would_change_the_decisions():
    """Why the draw is float32: the same rule with u rounded to bf16 decides differently on a sizeable share of the
    clipped tokens (so this test can fail if the function ever draws in the ratio's dtype)."""
    g = torch.Generator().manual_seed(1)
    r = 1.28 + torch.rand(100_000, generator=g) * 0.5  # clipped on the upper side
    u = torch.rand(100_000, generator=g)
    exact = u * r <= 1.28
    rounded = u.to(torch.bfloat16) * r.to(torch.bfloat16) <= 1.28
    assert (exact != rounded).float().mean() > 1e-3


def test_is_daa_weights_are_float32_for_bf16_log_probs():
    """Sequence log-probs of hundreds of tokens lose the ratio in bf16: the weights are computed from float32."""
    # Values exact in bf16; the log-weight 2 + 2^-7 is not (bf16 arithmetic would round it to 2.0)
    policy_chosen = torch.tensor([-300.0, -120.0], dtype=torch.bfloat16)
    policy_rejected = torch.tensor([-1.0, -100.0], dtype=torch.bfloat16)
    behavior_chosen = torch.tensor([-302.0, -121.0], dtype=torch.bfloat16)
    behavior_rejected = torch.tensor([-1.0078125, -100.0], dtype=torch.bfloat16)
    weights = is_daa_weights(policy_chosen, policy_rejected, behavior_chosen, behavior_rejected, weight_max=10.0)
    assert weights.dtype == torch.float32
    expected = torch.exp(torch.tensor([2.0078125, 1.0]))
    bf16_arithmetic = torch.exp(((policy_chosen - behavior_chosen) + (policy_rejected - behavior_rejected)).float())
    assert not torch.equal(bf16_arithmetic, expected)  # so the check below can fail
    assert torch.equal(weights, expected)


# ---------------------------------------------------------------- trainers: train in bf16, maths in float32
def _train_grpo_in_bf16_weights(model_path, reward, dataset, config_kwargs):
    """Train RLVRGRPOTrainer with bf16 weights; the step logs, and whether any parameter moved."""
    args = RLVRGRPOConfig(**config_kwargs, **BF16_WEIGHTS)
    trainer = RLVRGRPOTrainer(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset)
    _check_precision(trainer, "bf16_weights")
    before = _params(trainer)
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert logs and all(torch.isfinite(torch.tensor(log["loss"])) for log in logs)
    return logs, any(not torch.equal(p, before[n]) for n, p in _params(trainer).items())


@pytest.fixture
def ratio_dtypes(monkeypatch):
    """The dtypes of the ratios NSR receives in the trainer."""
    seen, original = [], clip_objective_module.clip_recovery_objective

    def spy(ratio, advantages, *args, **kwargs):
        seen.append(ratio.dtype)
        return original(ratio, advantages, *args, **kwargs)

    monkeypatch.setattr(clip_objective_module, "clip_recovery_objective", spy)
    return seen


@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
def test_nsr_trains_with_bf16_weights(tiny_model_path, tmp_path, ratio_dtypes, mode):
    logs, moved = _train_grpo_in_bf16_weights(
        tiny_model_path, digit_reward, prompt_dataset(), grpo_kwargs(tmp_path, clip_recovery=mode, max_steps=2)
    )
    assert ratio_dtypes and set(ratio_dtypes) == {torch.float32}, ratio_dtypes
    assert any(log["clip_ratio/region_mean"] > 0 for log in logs), "clip never active: the test is void"
    assert any(log["clip_recovery/high_frac"] + log["clip_recovery/low_frac"] > 0 for log in logs)
    assert moved


@pytest.mark.parametrize("curation", ["self", "pass_rate"])
def test_curation_trains_with_bf16_weights(tiny_model_path, tmp_path, curation):
    from trl_rlvr_ext.toy.task import make_task_datasets

    def half_right(completions, idx, **kwargs):
        return [float((i + sum(map(ord, c))) % 2 == 0) for i, c in zip(idx, completions)]

    data = make_task_datasets(num_train=12, num_test=4, min_digits=1, max_digits=2)["train"]
    kwargs = small_grpo_kwargs(tmp_path, curation=curation, curation_id_column="idx", max_steps=2)
    logs, moved = _train_grpo_in_bf16_weights(tiny_model_path, half_right, data, kwargs)
    assert len(logs) == 2 and moved
    assert all(any(key.startswith("curation/") for key in log) for log in logs)


def test_dynamic_sampling_trains_with_bf16_weights(tiny_model_path, tmp_path):
    from test_dynamic_sampling import data, half_constant_reward

    kwargs = small_grpo_kwargs(tmp_path, dynamic_sampling=True, max_steps=2)
    logs, moved = _train_grpo_in_bf16_weights(tiny_model_path, half_constant_reward, data(), kwargs)
    assert moved
    # Extra rounds ran and filled the batch with informative groups only
    assert len(logs) == 2 and all(log["dynamic_sampling/rounds"] > 1 for log in logs)
    assert all(log["dynamic_sampling/bound_hit"] == 0 and log["dynamic_sampling/kept_frac"] < 1 for log in logs)


def test_popo_trains_with_bf16_weights(tiny_model_path, tmp_path):
    from test_popo_trainer import METRICS, POPO

    kwargs = grpo_kwargs(tmp_path, **{**POPO, "max_steps": 2})
    logs, moved = _train_grpo_in_bf16_weights(tiny_model_path, digit_reward, prompt_dataset(), kwargs)
    assert len(logs) == 2 and moved
    assert all(torch.isfinite(torch.tensor(log[f"popo/{m}"])) for log in logs for m in METRICS)


def test_poise_trains_with_bf16_weights(tiny_model_path, tmp_path):
    from test_poise_trainer import POISE

    kwargs = small_grpo_kwargs(tmp_path, **{**POISE, "max_steps": 4})
    logs, moved = _train_grpo_in_bf16_weights(tiny_model_path, digit_reward, prompt_dataset(), kwargs)
    assert len(logs) == 4 and moved
    phases = [log["poise/phase"] for log in logs if "poise/phase" in log]
    assert 1 in phases, phases  # the probe, fitted on bf16 features, gave baselines


def _dpo_kwargs(output_dir, **overrides):
    """tests/test_dpo_trainer.py's CPU-sized DPO settings, with the precision the caller gives (it defaults to fp32)."""
    from test_dpo_trainer import _kwargs

    return _kwargs(output_dir, **overrides)


def test_is_dpo_trains_with_bf16_weights_and_float32_weights(tiny_model_path, tmp_path, monkeypatch):
    seen, original = [], dpo_trainer_module.is_daa_log_weights

    def spy(*logps):
        seen.append({t.dtype for t in logps})
        out = original(*logps)
        seen.append({out.dtype})
        return out

    monkeypatch.setattr(dpo_trainer_module, "is_daa_log_weights", spy)
    args = ISDPOConfig(**_dpo_kwargs(tmp_path, importance_sampling=True, **BF16_WEIGHTS))
    trainer = ISDPOTrainer(tiny_model_path, args=args, train_dataset=make_toy_preference_dataset(16, seed=0))
    _check_precision(trainer, "bf16_weights")
    before = _params(trainer)
    trainer.train()
    assert seen and all(dtypes == {torch.float32} for dtypes in seen[1::2]), seen  # the weights' log-ratios
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert any(log["is/weight_mean"] != 1.0 for log in logs), "the policy never left the reference: void"
    assert all(torch.isfinite(torch.tensor(log["loss"])) for log in logs)
    assert any(not torch.equal(p, before[n]) for n, p in _params(trainer).items())


# ---------------------------------------------------------------- options off: stock TRL to the bit, per precision
@pytest.mark.parametrize("precision", PRECISIONS)
def test_grpo_options_off_is_stock_in_each_precision(tiny_model_path, tmp_path, precision):
    runs = []
    for trainer_cls, config_cls in ((GRPOTrainer, GRPOConfig), (RLVRGRPOTrainer, RLVRGRPOConfig)):
        args = config_cls(**grpo_kwargs(tmp_path / trainer_cls.__name__, max_steps=3, **PRECISIONS[precision]))
        trainer = trainer_cls(
            model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
        )
        _check_precision(trainer, precision)
        trainer.train()
        runs.append((_logs(trainer), _params(trainer)))
    (stock_logs, stock_params), (our_logs, our_params) = runs
    assert any(log.get("clip_ratio/region_mean", 0) > 0 for log in stock_logs), "clip never active: void"
    assert stock_logs == our_logs
    assert stock_params.keys() == our_params.keys()
    for name, value in stock_params.items():
        assert torch.equal(value, our_params[name]), name


@pytest.mark.parametrize("precision", ["bf16_weights", "bf16_autocast"])
def test_dpo_importance_sampling_off_is_stock_in_bf16(tiny_model_path, tmp_path, precision):
    runs = []
    for trainer_cls, config_cls, extra in (
        (DPOTrainer, DPOConfig, {}),
        (ISDPOTrainer, ISDPOConfig, {"importance_sampling": False}),
    ):
        args = config_cls(**_dpo_kwargs(tmp_path / trainer_cls.__name__, **PRECISIONS[precision], **extra))
        trainer = trainer_cls(tiny_model_path, args=args, train_dataset=make_toy_preference_dataset(16, seed=0))
        _check_precision(trainer, precision)
        trainer.train()
        runs.append((_logs(trainer), _params(trainer)))
    (stock_logs, stock_params), (our_logs, our_params) = runs
    assert stock_logs == our_logs
    for name, value in stock_params.items():
        assert torch.equal(value, our_params[name]), name


def test_relex_records_bf16_weights_in_float32_then_float16(tiny_model_path, tmp_path):
    """RELEX with bf16 weights: θ_0 is saved in bf16, and each delta is θ_s − θ_0 taken in float32 and rounded once
    to float16 (the authors' dtype), so an update below a bf16 weight's resolution is not lost to the subtraction."""
    from safetensors.torch import load_file

    from trl_rlvr_ext.extrapolation.trajectory import delta_path

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, relex_record_steps=1, max_steps=2), **BF16_WEIGHTS)
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    _check_precision(trainer, "bf16_weights")
    trainer.train()
    directory = tmp_path / "relex_trajectory"
    base = load_file(directory / "base" / "model.safetensors")
    last = load_file(delta_path(str(directory), 2))
    final = trainer.model.state_dict()
    assert {value.dtype for value in base.values()} == {torch.bfloat16}
    assert {value.dtype for value in last.values()} == {torch.float16}
    for name, delta in last.items():
        assert torch.equal(delta, (final[name].float() - base[name].float()).to(torch.float16)), name
    assert sum(bool(delta.abs().max() > 0) for delta in last.values()) > len(last) // 2, "barely moved: void"
