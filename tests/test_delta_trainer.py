"""RLVRGRPOTrainer with DelTA's token credit (token_credit="delta"): the hidden states it reads are the ones entering
the LM head, with the weights forced to 1 the run is stock TRL to the bit (rollouts reused: num_iterations=2), with
NSR it composes, with the released settings it changes the update, and the config refuses what it cannot do."""

from contextlib import nullcontext

import pytest
import torch
import trl
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from packaging.version import Version
from test_grpo_trainer import _assert_same_run, _step_logs, _train
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.grpo.methods import delta as delta_method
from trl_rlvr_ext.testing import assert_stock_when_off


FORCED_ONE = {"token_credit": "delta", "token_credit_w_lo": 1.0, "token_credit_w_hi": 1.0}
METRICS = ["weight_mean", "weight_min", "weight_max", "weight_std", "frac_at_low", "frac_at_high"]


@pytest.mark.parametrize(
    "options",
    [{}, {"loss_type": "grpo", "importance_sampling_level": "sequence"}, {"loss_type": "luspo", "beta": 0.1}],
    ids=["dapo", "grpo-seq", "luspo-beta"],
)
def test_delta_with_the_weights_forced_to_one_is_stock_trl(tiny_model_path, tmp_path, options):
    """w_lo = w_hi = 1: every weight is exactly 1 (N / N), so the run must be stock TRL's to the bit (losses, every
    TRL metric, parameters) while the whole hidden-state path runs: the extra forward, the hook, the weights."""
    runs = assert_stock_when_off(
        FORCED_ONE,
        training_args=options,
        model=tiny_model_path,
        output_dir=tmp_path,
        extra_metrics=("token_credit/",),
        checkpoint=False,
    )
    logged = [log for log in _step_logs(runs.ours.trainer) if "token_credit/weight_mean" in log]
    assert len(logged) == 2  # once per generation batch (4 steps, each batch used twice)
    for log in logged:
        assert [log[f"token_credit/{name}"] for name in METRICS[:4]] == [1.0, 1.0, 1.0, 0.0]


def test_delta_with_forced_weights_composes_with_nsr(tiny_model_path, tmp_path):
    """NSR reads the weighted advantages: with the weights forced to 1 it rescues exactly what NSR alone does."""
    nsr = {"clip_recovery": "nsr"}
    plain, _, plain_after = _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "nsr", **nsr)
    ours, _, ours_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "both", **nsr, **FORCED_ONE
    )
    assert max(log["clip_recovery/high_frac"] + log["clip_recovery/low_frac"] for log in _step_logs(plain)) > 0
    _assert_same_run(plain, ours, plain_after, ours_after, exclude_prefix="token_credit/")


@pytest.mark.parametrize("reuse", [True, False], ids=["reused-shared-pass", "not-reused-own-pass"])
def test_the_captured_hidden_states_are_the_lm_head_inputs(tiny_model_path, tmp_path, monkeypatch, reuse):
    """The hook's hidden states are the model's last hidden states at the positions that predict the completion
    tokens, and the log-probabilities are TRL's (at its temperature); the weights come back in the batch. Rollouts
    reused: they come from TRL's old-log-prob pass, the only forward of the batch (no extra pass); not reused (TRL
    makes no such pass): from DelTA's own pass, in eval mode."""
    args = RLVRGRPOConfig(
        **grpo_kwargs(tmp_path, token_credit="delta", temperature=0.7, max_steps=1, num_iterations=2 if reuse else 1)
    )
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    seen = {}
    original = delta_method.delta_token_weights

    def spy(hidden, logps, advantages, mask, **kwargs):
        seen.update(hidden=hidden, logps=logps, advantages=advantages, mask=mask, kwargs=kwargs)
        return original(hidden, logps, advantages, mask, **kwargs)

    monkeypatch.setattr(delta_method, "delta_token_weights", spy)
    modes, forward = [], trainer._get_per_token_logps_and_entropies

    def record_mode(*args, **kwargs):
        modes.append(trainer.model.training)
        return forward(*args, **kwargs)

    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", record_mode)
    trainer.model.train()
    output = trainer._generate_and_score_completions([dict(trainer.train_dataset[i]) for i in range(8)])
    if reuse:  # one policy pass over the batch, TRL's (in the trainer's mode), which DelTA's hook rode on
        assert modes == [True] and trainer.model.training
        assert trainer.method("delta").shared_pass is not None
    else:  # DelTA's own pass, without dropout as the authors' (`actor_module.eval()`); then train again
        assert modes == [False] and trainer.model.training
        assert trainer.method("delta").shared_pass is None
    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", forward)
    input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    k = output["completion_ids"].size(1)
    trainer.model.eval()  # DelTA's pass runs without dropout
    # as TRL's forward runs: TRL 1.15+ scores under the accelerator's autocast (bf16 where its config asks for it),
    # TRL 1.14's full-logits path without it (its default bf16=True then leaves the scoring pass in float32)
    autocast = trainer.accelerator.autocast() if Version(trl.__version__) >= Version("1.15") else nullcontext()
    with torch.no_grad(), autocast:
        reference = trainer.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask, k)
    torch.testing.assert_close(seen["hidden"], reference.hidden_states[-1][:, -k - 1 : -1], rtol=0, atol=0)
    torch.testing.assert_close(seen["logps"], logps, rtol=0, atol=0)
    # and they are what the LM head turns into the sampled tokens' log-probs, at temperature 0.7
    logits = trainer.model.lm_head(seen["hidden"]) / 0.7
    expected = torch.log_softmax(logits.float(), -1).gather(-1, output["completion_ids"][..., None])[..., 0]
    mask = output["completion_mask"].bool()
    # (to bf16 rounding: the fused head runs under autocast; a one-position shift would be off by nats)
    torch.testing.assert_close(seen["logps"][mask], expected[mask], rtol=1e-3, atol=3e-3)
    assert seen["kwargs"] == {"w_lo": 0.8, "w_hi": 1.2, "refine_steps": 1}
    weights = output["token_credit_weights"]
    assert weights.shape == mask.shape and weights[mask].mean().item() == pytest.approx(1.0, rel=1e-5)
    assert (weights[mask] != 1).any(), "every weight is 1: the weights did not act"


def test_the_shared_pass_gives_the_own_pass_weights_to_the_bit(tiny_model_path, tmp_path, monkeypatch):
    """The weights from TRL's old-log-prob pass (the hook riding on it) are those of DelTA's own eval-mode pass over
    the same batch, to the bit: the same call on the same batch, and the model has no train-only module."""
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, token_credit="delta", max_steps=1))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    method = trainer.method("delta")
    taken, take = [], method.shared_pass.take
    monkeypatch.setattr(method.shared_pass, "take", lambda output: taken.append(take(output)) or taken[-1])
    trainer.model.train()
    output = trainer._generate_and_score_completions([dict(trainer.train_dataset[i]) for i in range(8)])
    shared = output["token_credit_weights"]
    assert len(taken) == 1 and taken[0][1] is output["old_per_token_logps"]  # the weights came from TRL's pass
    monkeypatch.setattr(method, "shared_pass", None)  # the own pass, on the same batch
    own = method.token_weights(output)
    assert torch.equal(shared, own) and (shared[output["completion_mask"].bool()] != 1).any()


def test_a_batch_the_shared_pass_did_not_score_gets_the_own_pass_and_a_warning(
    tiny_model_path, tmp_path, monkeypatch, caplog
):
    """A batch whose old log-probs are not the tensor TRL's pass returned (here: rebuilt, as a method might) is never
    weighed from the captured states: DelTA makes its own pass, with the same weights, and warns once."""
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, token_credit="delta", max_steps=1))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
    )
    method = trainer.method("delta")
    trainer.model.train()
    rows = [dict(trainer.train_dataset[i]) for i in range(8)]
    # TRL's scoring with DelTA's hook on its old-log-prob pass (the weights not yet added), as in training
    output = method.shared_pass.wrap(lambda r: GRPOTrainer._generate_and_score_completions(trainer, r), rows)
    assert method.shared_pass.captured is not None
    rebuilt = dict(output, old_per_token_logps=output["old_per_token_logps"].clone())
    with caplog.at_level("WARNING", logger=delta_method.__name__):
        weights = method.token_weights(rebuilt)
    assert "made its own forward pass" in caplog.text
    monkeypatch.setattr(method, "shared_pass", None)
    assert torch.equal(weights, method.token_weights(output))  # the own pass's weights


def test_dropout_keeps_the_own_pass_and_says_why(tiny_model_path, tmp_path, caplog):
    """With LoRA dropout, TRL's training-mode pass would differ from the authors' eval-mode pass: DelTA makes its own
    and the log says why."""
    from peft import LoraConfig

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, token_credit="delta", max_steps=1))
    with caplog.at_level("INFO", logger=delta_method.__name__):
        trainer = RLVRGRPOTrainer(
            model=tiny_model_path,
            reward_funcs=digit_reward,
            args=args,
            train_dataset=prompt_dataset(),
            peft_config=LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["q_proj", "v_proj"]),
        )
    assert trainer.method("delta").shared_pass is None
    assert "one extra no-grad forward" in caplog.text and "lora_dropout" in caplog.text and "p=0.1" in caplog.text


def test_delta_changes_the_update_and_logs_its_metrics(tiny_model_path, tmp_path):
    """The released settings (0.8 / 1.2, K = 1) on loss_type='dapo': the parameters differ from stock TRL's, and the
    logged weights are renormalised (mean 1) within the range the renormalisation allows."""
    _stock, _, stock_after = _train(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "stock", max_steps=2)
    ours, _, ours_after = _train(
        RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "ours", token_credit="delta", max_steps=2
    )
    assert any(not torch.equal(stock_after[n], ours_after[n]) for n in stock_after)
    logged = [log for log in _step_logs(ours) if "token_credit/weight_mean" in log]
    assert logged
    for log in logged:
        assert log["token_credit/weight_mean"] == pytest.approx(1.0, rel=1e-5)
        # raw weights in [0.8, 1.2], scaled by N / Σ raw ∈ [1/1.2, 1/0.8]
        assert 0.8 / 1.2 - 1e-6 <= log["token_credit/weight_min"] <= log["token_credit/weight_max"] <= 1.5 + 1e-6
        assert log["token_credit/weight_std"] > 0
        assert 0 <= log["token_credit/frac_at_low"] <= 1 and 0 <= log["token_credit/frac_at_high"] <= 1


@pytest.mark.parametrize("loss_type", ["cispo", "sapo", "vespo"])
def test_config_refuses_loss_types_without_the_clipped_objective(tmp_path, loss_type):
    with pytest.raises(ValueError, match=f"loss_type='{loss_type}' has none"):
        RLVRGRPOConfig(
            output_dir=str(tmp_path), use_cpu=True, report_to="none", token_credit="delta", loss_type=loss_type
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"token_credit": "deltas"}, "is not supported"),
        ({"token_credit": "delta", "token_credit_w_lo": 1.3}, "token_credit_w_lo <= token_credit_w_hi"),
        ({"token_credit": "delta", "token_credit_w_lo": -0.1}, "0 <= token_credit_w_lo"),
        ({"token_credit": "delta", "token_credit_refine_steps": -1}, "token_credit_refine_steps"),
    ],
)
def test_config_checks(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **overrides)


def test_config_defaults_are_the_released_script_and_off():
    args = RLVRGRPOConfig(output_dir="out", use_cpu=True, report_to="none")
    assert args.token_credit == "none"
    assert (args.token_credit_w_lo, args.token_credit_w_hi, args.token_credit_refine_steps) == (0.8, 1.2, 1)


def test_toy_delta_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    """The toy recipe parses with the released settings and trains two steps through the GRPO script (a dense reward:
    on the random tiny model the toy task's exact-match reward is 0 everywhere, so no token has an advantage)."""
    from test_acpo_recipes import FAST, ROOT, parse

    from trl_rlvr_ext.scripts import grpo as grpo_script

    argv = ["--config", str(ROOT / "recipes/grpo/toy_delta.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST, "--reward_funcs", "grpo_helpers.digit_reward"]
    script_args, training_args, model_args, dataset_args = parse(argv)
    assert training_args.token_credit == "delta" and training_args.loss_type == "dapo"
    assert (training_args.token_credit_w_lo, training_args.token_credit_w_hi) == (0.8, 1.2)
    assert (training_args.epsilon, training_args.epsilon_high, training_args.delta) == (0.2, 0.28, 10.0)
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2 and logs[0]["token_credit/weight_std"] > 0
    assert logs[0]["token_credit/weight_mean"] == pytest.approx(1.0, rel=1e-5)


def test_delta_with_a_lora_adapter(tiny_model_path, tmp_path):
    """Under PEFT the hook sits on the wrapped model's backbone: the run trains the adapter with non-trivial weights."""
    from peft import LoraConfig

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, token_credit="delta", max_steps=2, learning_rate=1e-3))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    trainer.train()
    logs = [log for log in _step_logs(trainer) if "token_credit/weight_std" in log]
    assert logs and logs[0]["token_credit/weight_std"] > 0


def test_delta_in_evaluation(tiny_model_path, tmp_path):
    """Evaluation computes the loss too: its batches get weights (per_device_eval_batch_size chunks), logged as eval_."""
    args = RLVRGRPOConfig(
        **grpo_kwargs(
            tmp_path,
            token_credit="delta",
            max_steps=2,
            eval_strategy="steps",
            eval_steps=2,
            per_device_eval_batch_size=4,
        )
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
    assert evals and evals[0]["eval_token_credit/weight_mean"] == pytest.approx(1.0, rel=1e-5)
