"""RLVRGRPOTrainer with ACPO's adaptive clip: exact against stock TRL where the widths are forced, binding clips in
training with every hard-clip loss type, composition with NSR, and the config's refusals. Every run reuses its
rollouts (grpo_kwargs: num_iterations=2), so the ratio leaves 1 and the clip can bind."""

import math

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from test_grpo_trainer import _assert_same_run, _step_logs, _train
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.testing import assert_stock_when_off


LOSS_OPTIONS = [
    {"loss_type": "dapo"},
    {"loss_type": "grpo"},
    {"loss_type": "bnpo", "delta": 1.5, "top_entropy_quantile": 0.5},
    {"loss_type": "dr_grpo", "beta": 0.1, "off_policy_mask_threshold": 0.5},
    {"loss_type": "luspo", "steps_per_generation": 2},
]
LOSS_IDS = ["dapo", "grpo", "bnpo-delta-entropy", "drgrpo-beta-opsm", "luspo-spg"]


def _forced_width(width):
    """ACPO with its width clamped to one value: every token's clip is [1 − width, 1 + width]."""
    return {"adaptive_clip": "acpo", "adaptive_clip_min": width, "adaptive_clip_max": width}


@pytest.mark.parametrize("options", LOSS_OPTIONS, ids=LOSS_IDS)
def test_acpo_with_a_forced_width_is_stock_trl_with_that_epsilon(tiny_model_path, tmp_path, options):
    """With min = max = 0.2, ACPO's per-token widths are all 0.2: the run must be stock TRL's with epsilon =
    epsilon_high = 0.2, to the bit (losses, every TRL metric, parameters), while that clip binds. This runs the copy
    of TRL's loss, the binning, the all-reduce of the moments and the per-token clamp end to end."""
    runs = assert_stock_when_off(
        _forced_width(0.2),
        training_args={"epsilon": 0.2, "epsilon_high": 0.2, **options},
        model=tiny_model_path,
        output_dir=tmp_path,
        extra_metrics=("adaptive_clip/",),
        checkpoint=False,
    )
    for log in _step_logs(runs.ours.trainer):  # ACPO's own clip counters see exactly TRL's clipped tokens
        assert log["adaptive_clip/clip_ratio_low"] == log["clip_ratio/low_mean"]
        assert log["adaptive_clip/clip_ratio_high"] == log["clip_ratio/high_mean"]


def test_acpo_with_a_huge_min_bound_is_stock_trl_with_the_same_wide_epsilon(tiny_model_path, tmp_path):
    """min = max = 1e6: no token is clipped; equal to stock TRL with epsilon = epsilon_high = 1e6, to the bit."""
    wide = {"epsilon": 1e6, "epsilon_high": 1e6}
    stock, _, stock_after = _train(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "stock", **wide)
    ours, _, ours_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "ours", **wide, **_forced_width(1e6)
    )
    _assert_same_run(stock, ours, stock_after, ours_after, exclude_prefix="adaptive_clip/")
    logs = _step_logs(ours)
    assert all(log["adaptive_clip/clip_ratio_high"] == 0 == log["adaptive_clip/clip_ratio_low"] for log in logs)
    # the ratios did move (reused rollouts): the statistics were real, the width alone kept every token
    assert max(v for log in logs for k, v in log.items() if k.startswith("adaptive_clip/ratio_std_bin")) > 1e-2
    assert all(v == 1e6 for log in logs for k, v in log.items() if k.startswith("adaptive_clip/bound_bin"))


@pytest.mark.parametrize("mode", ["nsr", "nsr_expected"])
def test_acpo_with_nsr_and_a_forced_width_equals_nsr_with_that_epsilon(tiny_model_path, tmp_path, mode):
    """NSR gets ACPO's per-token widths: with the width forced to 0.2 it must rescue exactly what NSR with epsilon
    0.2 rescues (same draws), with the same losses and parameters."""
    clip = {"epsilon": 0.2, "epsilon_high": 0.2, "clip_recovery": mode}
    plain, _, plain_after = _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "nsr", **clip)
    ours, _, ours_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "acpo", **clip, **_forced_width(0.2)
    )
    assert max(log["clip_recovery/high_frac"] + log["clip_recovery/low_frac"] for log in _step_logs(plain)) > 0
    if mode == "nsr":  # sampled rescue: bit-identical
        _assert_same_run(plain, ours, plain_after, ours_after, exclude_prefix="adaptive_clip/")
    else:  # the expected weights' (1 ± ε)² in float32 vs a Python double: the same rescues, values to rounding
        for a, b in zip(_step_logs(plain), _step_logs(ours), strict=True):
            assert a["clip_recovery/high_frac"] == b["clip_recovery/high_frac"]
            assert a["clip_recovery/low_frac"] == b["clip_recovery/low_frac"]
            assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
        for name, value in plain_after.items():
            torch.testing.assert_close(value, ours_after[name], rtol=1e-4, atol=1e-6)


def _check_bound_metrics(log, num_bins=5, alpha=3.0, base=0.2, min_clip=0.0, max_clip=3.0):
    assert sum(log[f"adaptive_clip/token_frac_bin{k}"] for k in range(num_bins)) == pytest.approx(1.0)
    present = [k for k in range(num_bins) if f"adaptive_clip/bound_bin{k}" in log]
    assert present, "no bin logged"
    for k in present:  # one loss computation per logged step: the logged bound is clamp(base + α·std)
        std = log[f"adaptive_clip/ratio_std_bin{k}"]
        expected = min(max_clip, max(min_clip, base + alpha * std))
        assert log[f"adaptive_clip/bound_bin{k}"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    ("options", "recovery"),
    [
        ({"loss_type": "dapo"}, "none"),
        ({"loss_type": "grpo"}, "none"),
        ({"loss_type": "bnpo"}, "none"),
        ({"loss_type": "dr_grpo"}, "none"),
        ({"loss_type": "luspo"}, "none"),
        ({"loss_type": "dapo"}, "nsr"),
        ({"loss_type": "grpo", "delta": 3.0}, "nsr_expected"),
    ],
    ids=["dapo", "grpo", "bnpo", "dr_grpo", "luspo", "dapo-nsr", "grpo-delta-nsr_expected"],
)
def test_training_with_acpo_binds_the_adaptive_clip(tiny_model_path, tmp_path, options, recovery):
    """The paper's settings (α = 3, base 0.2, [0, 3], 5 bins) on every hard-clip loss type, alone and with NSR.
    A low temperature (0.05) spreads the random tiny model's token probabilities over the bins (at temperature 1
    every sampled token has p < 0.2, and at lr 0.1 the bound grows with the spread until nothing clips); lr 0.01
    moves the ratios enough for ACPO's bound to bind, but not so far that NSR's rescue probability r/(1 − ε) of the
    clipped tokens is ~0."""
    trainer, before, after = _train(
        RLVRGRPOTrainer,
        RLVRGRPOConfig,
        tiny_model_path,
        tmp_path,
        adaptive_clip="acpo",
        clip_recovery=recovery,
        temperature=0.05,
        learning_rate=0.01,
        **options,
    )
    logs = _step_logs(trainer)
    assert len(logs) == 4 and all(not torch.equal(before[n], after[n]) for n in before)
    for log in logs:
        _check_bound_metrics(log)
    assert max(sum(f"adaptive_clip/bound_bin{k}" in log for k in range(5)) for log in logs) >= 3  # bins populated
    clipped = [log["adaptive_clip/clip_ratio_low"] + log["adaptive_clip/clip_ratio_high"] for log in logs]
    assert max(clipped) > 0, "ACPO's clip never bound: the test is void"
    bounds = [v for log in logs for k, v in log.items() if k.startswith("adaptive_clip/bound_bin")]
    assert max(bounds) > 0.25, "the bounds never left the base width: the statistics did not act"
    if recovery != "none":
        rescued = [log["clip_recovery/high_frac"] + log["clip_recovery/low_frac"] for log in logs]
        assert max(rescued) > 0, "tokens were clipped by ACPO but none was rescued"
        for log in logs:  # rescued tokens are a subset of the ones ACPO's bound clipped
            assert log["clip_recovery/high_frac"] <= log["adaptive_clip/clip_ratio_high"] + 1e-9
            assert log["clip_recovery/low_frac"] <= log["adaptive_clip/clip_ratio_low"] + 1e-9
            if recovery == "nsr_expected":
                assert log["clip_recovery/high_frac"] == pytest.approx(log["adaptive_clip/clip_ratio_high"])


def test_acpo_changes_the_update_against_stock_dapo(tiny_model_path, tmp_path):
    """ACPO is not a no-op: with the paper's settings its parameters differ from stock DAPO's (0.2 / 0.28)."""
    _stock, _, stock_after = _train(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "stock", max_steps=2)
    _ours, _, ours_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "ours", adaptive_clip="acpo", max_steps=2
    )
    assert any(not torch.equal(stock_after[n], ours_after[n]) for n in stock_after)


def test_defaults_are_the_papers_and_off():
    args = RLVRGRPOConfig(output_dir="out", use_cpu=True, report_to="none")
    assert args.adaptive_clip == "none" and args.adaptive_clip_scope == "global"
    assert (args.adaptive_clip_alpha, args.adaptive_clip_base) == (3.0, 0.2)
    assert (args.adaptive_clip_min, args.adaptive_clip_max, args.adaptive_clip_num_bins) == (0.0, 3.0, 5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"adaptive_clip": "dcpo"}, "adaptive_clip='dcpo' is not supported"),
        ({"adaptive_clip": "acpo", "loss_type": "cispo"}, "CISPO has no trust region to adapt"),
        ({"adaptive_clip": "acpo", "loss_type": "sapo"}, "SAPO replaces the clip by a soft sigmoid gate"),
        ({"adaptive_clip": "acpo", "loss_type": "vespo"}, "VESPO weighs sequences with gamma weights"),
        ({"adaptive_clip": "acpo", "importance_sampling_level": "sequence"}, "no token probability to bin"),
        ({"adaptive_clip": "acpo", "adaptive_clip_num_bins": 0}, "adaptive_clip_num_bins must be a positive"),
        ({"adaptive_clip": "acpo", "adaptive_clip_alpha": -1.0}, r"adaptive_clip_alpha must be a number >= 0"),
        (
            {"adaptive_clip": "acpo", "adaptive_clip_min": 0.5, "adaptive_clip_max": 0.4},
            "must be >= adaptive_clip_min",
        ),
        ({"adaptive_clip_scope": "rank"}, "adaptive_clip_scope='rank' is not supported"),
    ],
)
def test_config_rejects_invalid_acpo_settings(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **overrides)


def test_bound_metric_helper_is_strict():
    """The metric check above can fail: a bound that is not clamp(base + α·std) is caught."""
    log = {f"adaptive_clip/token_frac_bin{k}": 0.2 for k in range(5)}
    log |= {"adaptive_clip/bound_bin0": 0.5, "adaptive_clip/ratio_std_bin0": 0.2}
    with pytest.raises(AssertionError):
        _check_bound_metrics(log)
    log["adaptive_clip/bound_bin0"] = 0.2 + 3 * 0.2
    _check_bound_metrics(log)
    assert math.isclose(log["adaptive_clip/bound_bin0"], 0.8)


def test_grpo_kwargs_reuse_rollouts():
    assert grpo_kwargs("x")["num_iterations"] >= 2  # every run above reuses its rollouts


def test_an_overflowing_ratio_is_clamped_and_counted(tiny_model_path, tmp_path):
    """One completion token made far off-policy (its old log-prob lowered by 1000, so its ratio e^1000 overflows to
    inf): with ACPO the log-ratio is clamped at ±20 as the authors' `compute_policy_loss` does, so every bin's width,
    the loss and the parameters stay finite, and `adaptive_clip/overflow_frac` counts that one token among the
    completion tokens. grpo_kwargs: one generation batch of 8 completions, one micro-batch per step, used by both
    steps (num_iterations=2)."""
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, adaptive_clip="acpo", max_steps=2))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    generate, shares = trainer._generate_and_score_completions, []

    def generate_with_one_overflow(inputs):
        output = generate(inputs)
        mask = output["completion_mask"]
        row, column = mask.nonzero()[0].tolist()  # the batch's first completion token
        output["old_per_token_logps"][row, column] -= 1000.0
        shares.append(1.0 / mask.sum().item())
        return output

    trainer._generate_and_score_completions = generate_with_one_overflow
    trainer.train()
    logs = _step_logs(trainer)
    assert len(logs) == 2 and len(shares) == 1
    for log in logs:
        assert math.isfinite(log["loss"])
        assert log["adaptive_clip/overflow_frac"] == pytest.approx(shares[0], rel=1e-6)
        bounds = [v for k, v in log.items() if k.startswith("adaptive_clip/bound_bin")]
        assert bounds and all(math.isfinite(v) for v in bounds)
        assert max(bounds) == 3.0  # the bin of the e^20 ratio: its width at max_clip
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
