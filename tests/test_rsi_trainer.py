"""RLVRGRPOTrainer with RSI-S (rsi_selection): an interval that keeps every token is stock TRL to the bit while the
whole path runs; a selecting interval is exactly TRL's entropy-mask path with RSI-S's mask in its place; the dropped
tokens get no gradient; the rsi/* metrics say what was kept; the config refuses what it cannot do."""

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from test_grpo_trainer import _assert_same_run, _step_logs, _train
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.losses import relative_surprisal_index, rsi_interval_mask
from trl_rlvr_ext.testing import assert_stock_when_off


KEEP_ALL = {"rsi_selection": "interval", "rsi_low": 0.0}  # RSI >= 0: every completion token is kept
# The tiny random model's next-token distributions are close to uniform, so RSI ≈ 1 (p10-p90 ≈ 0.9-1.1): this interval
# drops tokens on both sides
INTERVAL = {"rsi_selection": "interval", "rsi_low": 0.98, "rsi_high": 1.02}


@pytest.mark.parametrize(
    "options",
    [{}, {"loss_type": "grpo", "importance_sampling_level": "sequence"}, {"loss_type": "bnpo", "entropy_coef": 0.1}],
    ids=["dapo", "grpo-seq", "bnpo-entropy-bonus"],
)
def test_an_interval_keeping_every_token_is_stock_trl(tiny_model_path, tmp_path, options):
    """rsi_low = 0 alone keeps every token: the run must be stock TRL's to the bit (losses, every TRL metric,
    parameters, with rollouts reused) while the selection runs (the RSI, the gather, the mask, the metrics)."""
    runs = assert_stock_when_off(
        KEEP_ALL,
        training_args=options,
        model=tiny_model_path,
        output_dir=tmp_path,
        extra_metrics=("rsi/",),
        checkpoint=False,
    )
    logs = _step_logs(runs.ours.trainer)
    assert all(log["rsi/kept_frac"] == 1.0 and log["rsi/dropped_low_frac"] == 0.0 for log in logs)
    assert all(log["rsi/mean"] > 0 for log in logs)


def _stock_with_rsi_as_entropy_mask(tiny_model_path, output_dir, low, high, **options):
    """Stock TRL running its `top_entropy_quantile` path, with `get_high_entropy_mask` answering RSI-S's mask, computed
    by the pure functions from the log-probs of the same loss forward."""
    args = GRPOConfig(**grpo_kwargs(output_dir, top_entropy_quantile=0.5, **options))
    trainer = GRPOTrainer(model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())
    forward, last = trainer._get_per_token_logps_and_entropies, {}

    def remember(*args, **kwargs):
        out = forward(*args, **kwargs)
        last["logps"] = out[0]
        return out

    def rsi_mask(entropies, mask, threshold):  # the loss forward is the last one before the mask
        return rsi_interval_mask(relative_surprisal_index(last["logps"], entropies, mask), mask, low, high)

    trainer._get_per_token_logps_and_entropies = remember
    trainer.get_high_entropy_mask = rsi_mask
    trainer.train()
    return trainer, {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("options", [{}, {"loss_type": "grpo", "entropy_coef": 0.05}], ids=["dapo", "grpo-bonus"])
def test_rsi_selection_is_trls_entropy_mask_path_with_the_rsi_mask(tiny_model_path, tmp_path, options):
    """The selection acts exactly where TRL's entropy mask acts: TRL's own top_entropy_quantile path, its mask replaced
    by RSI-S's (computed by `relative_surprisal_index` / `rsi_interval_mask`), gives the same losses, metrics and
    parameters to the bit (so the dropped tokens stay in the normaliser and the entropy bonus covers the kept ones)."""
    reference, reference_after = _stock_with_rsi_as_entropy_mask(
        tiny_model_path, tmp_path / "ref", 0.98, 1.02, **options
    )
    ours, _, ours_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "ours", **options, **INTERVAL
    )
    _assert_same_run(reference, ours, reference_after, ours_after, exclude_prefix="rsi/")
    logs = _step_logs(ours)
    assert all(0 < log["rsi/kept_frac"] < 1 for log in logs), "the interval kept all or nothing: the test is void"
    _stock, _, stock_after = _train(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "stock", **options)
    assert any(not torch.equal(stock_after[n], ours_after[n]) for n in stock_after), "RSI-S did not change the update"


def test_dropped_tokens_get_no_gradient(tiny_model_path, tmp_path):
    """With per-token advantages, changing the advantage of a dropped token changes neither the loss nor any
    gradient; changing a kept token's does."""
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, num_iterations=1, **INTERVAL))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, read by the loss
    inputs = trainer._generate_and_score_completions([dict(trainer.train_dataset[i]) for i in range(8)])
    mask = inputs["completion_mask"].bool()
    with torch.no_grad():
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, mask.size(1), compute_entropy=True
        )
    keep = rsi_interval_mask(relative_surprisal_index(logps, entropies, mask), mask, 0.98, 1.02)
    dropped = mask & ~keep
    assert keep.any() and dropped.any(), "the interval kept all or nothing: the test is void"
    base = inputs["advantages"].unsqueeze(1).expand_as(mask).clone()

    def loss_and_grads(advantages):
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, {**inputs, "advantages": advantages})
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]

    loss, grads = loss_and_grads(base)
    noise = torch.randn(base.shape, generator=torch.Generator().manual_seed(0))
    moved_loss, moved_grads = loss_and_grads(torch.where(dropped, base + 3 * noise, base))
    assert torch.equal(loss, moved_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, moved_grads, strict=True))
    kept_loss, kept_grads = loss_and_grads(torch.where(keep, base + 3 * noise, base))
    assert not torch.equal(loss, kept_loss)
    assert any(not torch.equal(a, b) for a, b in zip(grads, kept_grads, strict=True))


def test_metrics_of_the_interval_and_the_quantile_modes(tiny_model_path, tmp_path):
    """`rsi/*`: the kept and dropped shares add up to 1 (interval); the percentiles are ordered; with quantiles
    (0.2, 0.8) about 60 % of the tokens are kept, between the logged bounds."""
    ours, _, _ = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "interval", max_steps=2, **INTERVAL
    )
    for log in _step_logs(ours):
        shares = log["rsi/kept_frac"] + log["rsi/dropped_low_frac"] + log["rsi/dropped_high_frac"]
        assert shares == pytest.approx(1.0, abs=1e-12)
        assert 0 <= log["rsi/p10"] <= log["rsi/p50"] <= log["rsi/p90"]
        assert 0 <= log["rsi/kept_frac_pos_adv"] <= 1 and 0 <= log["rsi/kept_frac_neg_adv"] <= 1
        assert 0 < log["rsi/sequences_kept_frac"] <= 1
        assert "rsi/bound_low" not in log
    quantile = {"rsi_selection": "quantile", "rsi_quantile_low": 0.2, "rsi_quantile_high": 0.8}
    ours, _, _ = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "quantile", max_steps=2, **quantile
    )
    for log in _step_logs(ours):
        assert log["rsi/kept_frac"] == pytest.approx(0.6, abs=0.1)
        assert log["rsi/p10"] <= log["rsi/bound_low"] <= log["rsi/p50"] <= log["rsi/bound_high"] <= log["rsi/p90"]


def test_eval_batches_are_selected_and_logged_with_the_eval_prefix(tiny_model_path, tmp_path):
    args = RLVRGRPOConfig(
        **grpo_kwargs(tmp_path, max_steps=1, eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=8),
        **INTERVAL,
    )
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(),
        eval_dataset=prompt_dataset(8),
    )
    trainer.train()
    evals = [log for log in trainer.state.log_history if "eval_loss" in log]
    assert evals and all(0 <= log["eval_rsi/kept_frac"] <= 1 for log in evals)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rsi_selection": "surprisal"}, "rsi_selection='surprisal' is not supported"),
        ({"rsi_selection": "interval"}, "needs at least one of \\['rsi_low', 'rsi_high'\\]: the paper"),
        ({"rsi_selection": "quantile"}, "needs at least one of \\['rsi_quantile_low', 'rsi_quantile_high'\\]"),
        ({"rsi_low": 0.5}, "rsi_low set with rsi_selection='none'"),
        ({"rsi_selection": "quantile", "rsi_quantile_low": 0.1, "rsi_high": 2.0}, "rsi_high set with"),
        ({"rsi_selection": "interval", "rsi_low": 0.5, "rsi_quantile_high": 0.9}, "rsi_quantile_high set with"),
        ({"rsi_selection": "interval", "rsi_low": -0.1}, "rsi_low must be a number >= 0"),
        ({"rsi_selection": "interval", "rsi_high": float("nan")}, "rsi_high must be a number >= 0"),
        ({"rsi_selection": "interval", "rsi_low": 3.0, "rsi_high": 1.0}, "rsi_low \\(3.0\\) must be <= rsi_high"),
        ({"rsi_selection": "quantile", "rsi_quantile_high": 1.5}, "rsi_quantile_high must be a quantile in"),
        ({"rsi_selection": "quantile", "rsi_quantile_low": 0.9, "rsi_quantile_high": 0.1}, "must be <="),
        ({**INTERVAL, "rsi_eps": -1.0}, "rsi_eps must be >= 0"),
        ({**INTERVAL, "top_entropy_quantile": 0.2}, "Set top_entropy_quantile=1.0, or rsi_selection='none'"),
    ],
)
def test_config_refusals(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **overrides)


@pytest.mark.parametrize(
    "options",
    [
        {"clip_recovery": "nsr"},
        {"adaptive_clip": "acpo", "off_policy_diagnostics": True},
        {"token_credit": "delta"},
    ],
    ids=["nsr", "acpo-diagnostics", "delta"],
)
def test_composes_with_the_other_loss_options(tiny_model_path, tmp_path, options):
    """RSI-S masks the per-token loss after NSR / ACPO / DelTA have built it: an interval keeping every token leaves each
    option's run unchanged to the bit (its own metrics included), and a selecting one runs beside it."""
    alone, _, alone_after = _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "alone", **options)
    both, _, both_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "both", **options, **KEEP_ALL
    )
    _assert_same_run(alone, both, alone_after, both_after, exclude_prefix="rsi/")
    selecting, _, _ = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "sel", max_steps=2, **options, **INTERVAL
    )
    assert all(log["rsi/kept_frac"] < 1 for log in _step_logs(selecting))


def test_toy_rsi_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    """The toy recipe parses with its interval and trains two steps through the GRPO script (a dense reward: on the
    random tiny model the toy task's exact-match reward is 0 everywhere)."""
    from test_acpo_recipes import FAST, ROOT, parse

    from trl_rlvr_ext.scripts import grpo as grpo_script

    argv = ["--config", str(ROOT / "recipes/grpo/toy_rsi.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST, "--reward_funcs", "grpo_helpers.digit_reward"]
    script_args, training_args, model_args, dataset_args = parse(argv)
    assert (training_args.rsi_selection, training_args.rsi_low, training_args.rsi_high) == ("interval", 0.25, 3.0)
    assert training_args.rsi_quantile_low is None and training_args.loss_type == "dapo"
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2 and all(0 < log["rsi/kept_frac"] <= 1 for log in logs)
    # and a quantile run from the command line: the bounds parse as floats
    argv += ["--rsi_selection", "quantile", "--rsi_low", "None", "--rsi_high", "None"]
    argv += ["--rsi_quantile_low", "0.1", "--rsi_quantile_high", "0.9"]
    training_args = parse(argv)[1]
    assert (training_args.rsi_quantile_low, training_args.rsi_quantile_high) == (0.1, 0.9)
