"""RLVRGRPOTrainer with POPO (objective="popo"): it trains (the policy and the predictor move, the loss and popo/*
are logged), the EMA target follows ξ ← τ·ξ + (1 − τ)·θ step by step, the weights are the authors' on the batch, a
resumed run has the uninterrupted run's EMA and predictor, LoRA shares the frozen base with the EMA copy, and the
config refuses what POPO cannot combine with. Off (objective="grpo", the default) the run is stock TRL: that is
tests/test_grpo_trainer.py::test_clip_recovery_none_is_stock_grpo, which runs every override with every option off."""

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from test_grpo_trainer import _step_logs
from transformers import TrainerCallback

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.grpo.methods import popo as popo_module
from trl_rlvr_ext.losses.popo import popo_weights


POPO = {"objective": "popo", "num_iterations": 1, "learning_rate": 1e-2, "popo_tau": 0.9, "popo_kl_monitor_steps": 1}
METRICS = ["nll_loss", "sim_loss", "ent_loss", "entropy", "positive_ratio", "groups_with_positive", "weight_max"]


class _Record(TrainerCallback):
    """θ after every optimizer step (before our EMA callback runs it is already updated: both read the same θ_t)."""

    def __init__(self):
        self.params = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.params.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})


def _trainer(model_path, output_dir, peft_config=None, **overrides):
    args = RLVRGRPOConfig(**grpo_kwargs(output_dir, **{**POPO, **overrides}))
    return RLVRGRPOTrainer(
        model=model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset(), peft_config=peft_config
    )


def test_popo_trains_and_the_ema_moves_at_rate_tau(tiny_model_path, tmp_path):
    trainer = _trainer(tiny_model_path, tmp_path, max_steps=3)
    record = _Record()
    trainer.add_callback(record)
    theta0 = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    predictor0 = {n: p.detach().clone() for n, p in trainer.method("popo").predictor.named_parameters()}
    trainer.train()
    logs = _step_logs(trainer)
    assert len(logs) == 3 and all(f"popo/{m}" in log for log in logs for m in METRICS)
    assert any(log["popo/nll_loss"] > 0 for log in logs) and all(-1 <= log["popo/sim_loss"] <= 1 for log in logs)
    assert "popo/kl_to_ema" in logs[-1] and logs[-1]["popo/kl_to_ema"] >= 0
    # the policy and the predictor (its own param group) moved
    assert any(not torch.equal(theta0[n], record.params[-1][n]) for n in theta0)
    assert any(not torch.equal(predictor0[n], p) for n, p in trainer.method("popo").predictor.named_parameters())
    assert any(
        p is next(trainer.method("popo").predictor.parameters())
        for g in trainer.optimizer.param_groups
        for p in g["params"]
    )
    assert all(
        p.grad is None or not p.grad.any() for p in trainer.method("popo").predictor.parameters()
    )  # zeroed each step
    # ξ_t = τ·ξ_{t−1} + (1 − τ)·θ_t, from ξ_0 = θ_0
    tau, expected = 0.9, dict(theta0)
    for step in record.params:
        expected = {n: tau * expected[n] + (1 - tau) * step[n] for n in expected}
    ema = dict(zip(trainer.method("popo").ema_names, trainer.method("popo").ema_params, strict=True))
    assert sorted(ema) == sorted(expected)
    assert any(not torch.allclose(ema[n], record.params[-1][n]) for n in expected)  # a lagging copy, not θ
    for n in expected:
        torch.testing.assert_close(ema[n], expected[n], rtol=1e-5, atol=1e-6)


def test_the_weights_are_the_authors_on_the_batch(tiny_model_path, tmp_path, monkeypatch):
    """The stored weights are popo_weights of θ_old's log-probs (TRL's temperature) with the positives r > τ_r."""
    trainer = _trainer(tiny_model_path, tmp_path, max_steps=1, temperature=0.7)
    seen = {}
    original = popo_module.popo_weights_from_means

    def spy(means, lengths, positive, group, **kwargs):
        seen["positive"] = positive
        return original(means, lengths, positive, group, **kwargs)

    monkeypatch.setattr(popo_module, "popo_weights_from_means", spy)
    trainer.model.train()
    output = trainer._generate_and_score_completions([dict(trainer.train_dataset[i]) for i in range(8)])
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, output["completion_ids"].size(1)
        )
    expected = popo_weights(logps, output["completion_mask"], seen["positive"], 4)
    torch.testing.assert_close(output["popo_weights"], expected)
    completions = trainer.processing_class.batch_decode(output["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor(digit_reward(completions))
    assert torch.equal(output["popo_positive"], rewards > 0)
    assert 0 < output["popo_positive"].sum() < 8, "all or no positives: the test is void"


def test_resume_restores_the_ema_and_the_predictor(tiny_model_path, tmp_path):
    common = {"max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    full = _trainer(tiny_model_path, tmp_path / "a", **common)
    full.train()
    assert (tmp_path / "a" / "checkpoint-2" / popo_module.POPO_STATE_FILE).is_file()
    resumed = _trainer(tiny_model_path, tmp_path / "a", **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))
    for a, b in zip(full.method("popo").ema_params, resumed.method("popo").ema_params, strict=True):
        assert torch.equal(a, b)
    for (n, a), b in zip(
        full.method("popo").predictor.state_dict().items(), resumed.method("popo").predictor.state_dict().values()
    ):
        assert torch.equal(a, b), n
    # a checkpoint without POPO's state cannot resume a POPO run
    (tmp_path / "a" / "checkpoint-2" / popo_module.POPO_STATE_FILE).unlink()
    again = _trainer(tiny_model_path, tmp_path / "a", **common)
    with pytest.raises(FileNotFoundError, match="objective='popo'"):
        again.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))


def test_popo_with_a_lora_adapter_shares_the_frozen_base(tiny_model_path, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    trainer = _trainer(tiny_model_path, tmp_path, peft_config=lora, max_steps=2, learning_rate=1e-3)
    online = dict(trainer.model.named_parameters())
    ema = dict(trainer.method("popo").ema.named_parameters())
    frozen = [n for n, p in online.items() if not p.requires_grad]
    assert frozen and all(ema[n] is online[n] for n in frozen)  # shared: no second copy of the base
    assert trainer.method("popo").ema_names and all("lora_" in n for n in trainer.method("popo").ema_names)
    assert all(ema[n] is not online[n] for n in trainer.method("popo").ema_names)
    base_before = {n: online[n].detach().clone() for n in frozen}
    trainer.train()
    assert all(torch.equal(base_before[n], online[n]) for n in frozen)  # the EMA update never touches the base
    logs = _step_logs(trainer)
    assert logs and all("popo/nll_loss" in log for log in logs)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"beta": 0.04}, "no KL term"),
        ({"entropy_coef": 0.01}, "count it twice"),
        ({"use_adaptive_entropy": True}, "count it twice"),
        ({"token_credit": "delta"}, "token_credit"),
        ({"clip_recovery": "nsr"}, "clip_recovery"),
        ({"rsi_selection": "interval", "rsi_low": 0.5}, "rsi_selection"),
        ({"top_entropy_quantile": 0.2}, "entropy mask"),
        ({"reward_weights": [1.0]}, "unweighted mean"),
        ({"dynamic_sampling": True}, "not composed"),
        ({"popo_tau": 1.5}, "popo_tau must be in"),
        ({"popo_alpha": -0.1}, "popo_alpha must be >= 0"),
        ({"popo_weight_mode": "sequence"}, "popo_weight_mode"),
        ({"popo_predictor_layers": 1}, "popo_predictor_layers >= 2"),
        ({"popo_weight_temperature": 0.0}, "popo_weight_temperature must be > 0"),
        ({"objective": "sft"}, "objective='sft' is not supported"),
    ],
)
def test_config_refusals(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{"objective": "popo", **overrides})


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_the_trainer_loss_is_the_authors_on_a_batch(tiny_model_path, tmp_path, temperature):
    """POPO's `compute_loss` on a generated batch equals the authors' `_compute_loss` arithmetic re-done by hand: full
    logits / T, their chunked entropy, hidden_states[-1] pooled over the completion for the online model and the EMA
    copy, the predictor, `POPOLoss` (noise off, so the comparison is deterministic), over the accumulation steps. At
    T = 1 the division is skipped (x / 1 is x)."""
    from test_popo_loss import authors_entropy, authors_loss, authors_pool

    trainer = _trainer(tiny_model_path, tmp_path, max_steps=1, temperature=temperature, popo_feature_noise_std=0.0)
    trainer.model.train()
    inputs = trainer._generate_and_score_completions([dict(trainer.train_dataset[i]) for i in range(8)])
    trainer.current_gradient_accumulation_steps = 2
    ours = trainer.method("popo").compute_loss(trainer.model, inputs)
    prompt_len, k = inputs["prompt_ids"].size(1), inputs["completion_ids"].size(1)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    cmask = inputs["completion_mask"]
    out = trainer.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    logits = out.logits[:, :-1, :][:, -k:, :] / temperature
    logps = torch.log_softmax(logits.float(), -1).gather(-1, inputs["completion_ids"][..., None])[..., 0]
    predicted = trainer.method("popo").predictor(authors_pool(out.hidden_states[-1][:, prompt_len:], cmask))
    with torch.no_grad():
        target_hidden = (
            trainer.method("popo").ema(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        )
    target = authors_pool(target_hidden[-1][:, prompt_len:], cmask)
    weights = inputs["popo_weights"]
    assert inputs["popo_positive"].any() and torch.equal(inputs["popo_positive"], weights > 0)
    theirs, *_ = authors_loss(logps, cmask, weights, authors_entropy(logits), predicted, target, 0.1, 0.01)
    torch.testing.assert_close(ours, theirs / 2, rtol=1e-5, atol=1e-6)


def test_popo_in_evaluation(tiny_model_path, tmp_path):
    """Evaluation computes the loss too (no noise, weights on eval groups), logged as eval_popo/*."""
    args = RLVRGRPOConfig(
        **grpo_kwargs(tmp_path, **{**POPO, "max_steps": 2, "eval_strategy": "steps", "eval_steps": 2})
    )
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(),
        eval_dataset=prompt_dataset(4),
    )
    trainer.train()
    evals = [log for log in trainer.state.log_history if "eval_loss" in log]
    assert evals and "eval_popo/nll_loss" in evals[0] and "eval_popo/groups_with_positive" in evals[0]


def test_toy_popo_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    """The toy recipe parses with the authors' defaults and trains two steps through the GRPO script (a dense reward:
    on the random tiny model the toy task's exact-match reward is 0 everywhere)."""
    from test_acpo_recipes import FAST, ROOT, parse

    from trl_rlvr_ext.losses import POPO_PAPER_SETTINGS
    from trl_rlvr_ext.scripts import grpo as grpo_script

    argv = ["--config", str(ROOT / "recipes/grpo/toy_popo.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST, "--reward_funcs", "grpo_helpers.digit_reward"]
    script_args, training_args, model_args, dataset_args = parse(argv)
    assert training_args.objective == "popo"
    for name, value in POPO_PAPER_SETTINGS.items():
        assert getattr(training_args, f"popo_{name}") == value, name
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2 and all("popo/nll_loss" in log and "popo/groups_with_positive" in log for log in logs)


def test_sharded_training_and_low_precision_ema(tiny_model_path, tmp_path, caplog):
    """DeepSpeed and FSDP are refused (the EMA copy and the predictor are not sharded); an EMA copy in bfloat16 is
    said in the log (updates below its rounding are lost)."""
    trainer = _trainer(tiny_model_path, tmp_path, max_steps=1)
    for flag in ("is_deepspeed_enabled", "is_fsdp_enabled"):
        trainer.is_deepspeed_enabled = trainer.is_fsdp_enabled = False
        setattr(trainer, flag, True)
        with pytest.raises(ValueError, match="DeepSpeed and FSDP are refused"):
            trainer.method("popo").setup(trainer)
    with caplog.at_level("WARNING", logger="trl_rlvr_ext.grpo.methods.popo"):
        _trainer(tiny_model_path, tmp_path / "bf16", max_steps=1, model_init_kwargs={"dtype": "bfloat16"}, bf16=False)
    assert any("EMA copy holds trainable weights in torch.bfloat16" in r.getMessage() for r in caplog.records)


def test_neg_logp_delta_measures_the_negatives_change(tiny_model_path, tmp_path):
    """popo_neg_logp_delta: from the second generation batch on, the previous batch's negatives re-scored after the
    update; with a zero learning rate nothing moved (0 up to batch-shape rounding), with a real one it did."""
    still = _trainer(tiny_model_path, tmp_path / "still", max_steps=3, learning_rate=0.0, popo_neg_logp_delta=True)
    still.train()
    deltas = [log["popo/neg_logp_delta"] for log in _step_logs(still) if "popo/neg_logp_delta" in log]
    assert len(deltas) == 2 and all(abs(d) < 1e-5 for d in deltas)
    moving = _trainer(tiny_model_path, tmp_path / "moving", max_steps=3, popo_neg_logp_delta=True)
    moving.train()
    deltas = [log["popo/neg_logp_delta"] for log in _step_logs(moving) if "popo/neg_logp_delta" in log]
    assert len(deltas) == 2 and all(abs(d) > 1e-4 for d in deltas)
    assert all("popo/neg_logp_delta" not in log for log in _step_logs(_trainer_run(tiny_model_path, tmp_path)))


def _trainer_run(model_path, output_dir):
    trainer = _trainer(model_path, output_dir / "off", max_steps=2)
    trainer.train()
    return trainer


def test_the_signal_check_knows_popo_trains_on_all_correct_groups(tiny_model_path, tmp_path):
    """Every rollout correct: no reward spread, so GRPO has no signal (warned), but POPO trains on them (not warned);
    every rollout wrong: no positive, POPO has no signal either (warned)."""

    def always(value):
        return lambda completions, **kwargs: [value] * len(completions)

    warned = {}
    for name, reward, objective in [("grpo1", 1.0, "grpo"), ("popo1", 1.0, "popo"), ("popo0", 0.0, "popo")]:
        overrides = {**POPO, "objective": objective, "max_steps": 1, "signal_check_steps": 1}
        args = RLVRGRPOConfig(**grpo_kwargs(tmp_path / name, **overrides))
        trainer = RLVRGRPOTrainer(
            model=tiny_model_path, reward_funcs=always(reward), args=args, train_dataset=prompt_dataset()
        )
        trainer.train()
        warned[name] = any("No learning signal" in w for w in trainer.signal_check_warnings)
    assert warned == {"grpo1": True, "popo1": False, "popo0": True}
