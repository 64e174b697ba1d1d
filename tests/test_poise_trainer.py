"""RLVRGRPOTrainer with POISE's value baseline (value_baseline="poise"): off, it is stock TRL to the bit; while it
bootstraps, its RLOO advantages are exactly twice TRL's unscaled group advantages (so with SGD at half the learning rate
the run is stock TRL's to the bit), and under "pair_average" they are TRL's own; then the probe takes over and trains; a resume restores the probe exactly; the
features are the authors' (layer output, last-n pooling); the config refuses what it cannot do."""

import pytest
import torch
from grpo_helpers import digit_reward, prompt_dataset, small_grpo_kwargs
from test_grpo_trainer import _step_logs
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.losses.poise import pool_last_n
from trl_rlvr_ext.testing import assert_stock_when_off


POISE = {
    "value_baseline": "poise",
    "scale_rewards": "none",
    "poise_bootstrap_steps": 2,
    "poise_warmup_steps": 1,
    "poise_prompt_pca": 4,
    "poise_response_pca": 4,
    "poise_pool_n": 4,
}


def has_digit(completions, **kwargs):
    """A 0/1 reward: then RLOO's r_i − r_j is exactly 2 × TRL's r_i − (r_i + r_j)/2 in floating point."""
    return [float(any(ch.isdigit() for ch in c)) for c in completions]


def poise_trainer(output_dir, model_path, reward=digit_reward, **overrides):
    args = RLVRGRPOConfig(**small_grpo_kwargs(output_dir, **{**POISE, "max_steps": 4, **overrides}))
    return RLVRGRPOTrainer(model=model_path, reward_funcs=reward, args=args, train_dataset=prompt_dataset())


def test_poise_settings_with_the_option_off_are_stock_trl(tiny_model_path, tmp_path):
    """value_baseline='none' with every poise_* field moved: stock TRL to the bit (losses, metrics, parameters)."""
    moved = {k: v for k, v in POISE.items() if k.startswith("poise_")} | {"poise_layer": 0, "poise_alpha": 3.0}
    runs = assert_stock_when_off(
        {"value_baseline": "none", **moved}, model=tiny_model_path, output_dir=tmp_path, checkpoint=False
    )
    assert "poise" not in [method.name for method in runs.ours.trainer.methods]


def _sgd_run(tmp_path, model_path, trainer_cls, config_cls, lr, **extra):
    """3 steps of plain SGD (no gradient clipping) with 0/1 rewards, unscaled advantages and reused rollouts."""
    common = {"optim": "sgd", "max_grad_norm": 1e9, "scale_rewards": "none", "max_steps": 3, "num_iterations": 2}
    output_dir = tmp_path / f"{trainer_cls.__name__}{lr}{extra.get('poise_target_mode', '')}"
    args = config_cls(**small_grpo_kwargs(output_dir, **common, learning_rate=lr, **extra))
    trainer = trainer_cls(model=model_path, reward_funcs=has_digit, args=args, train_dataset=prompt_dataset())
    trainer.train()
    return trainer


def test_bootstrap_is_rloo_twice_trls_advantage(tiny_model_path, tmp_path):
    """Bootstrap: A_i = r_i − r_j, exactly 2 × TRL's (r_i − mean) with scale_rewards='none' and 0/1 rewards. Plain SGD
    is linear in the gradient and ×2 is exact in floating point, so POISE at lr and stock TRL at 2·lr reach the same
    parameters, bit for bit (no gradient clipping: it would not commute with ×2). The whole POISE path runs: the
    extra forward, the hook, the gathers, the replacement."""

    def run(trainer_cls, config_cls, lr, **extra):
        return _sgd_run(tmp_path, tiny_model_path, trainer_cls, config_cls, lr, **extra)

    stock = run(GRPOTrainer, GRPOConfig, 0.2)
    ours = run(RLVRGRPOTrainer, RLVRGRPOConfig, 0.1, value_baseline="poise", poise_bootstrap_steps=16)
    assert any(log["reward_std"] > 0 for log in _step_logs(stock)), "no reward spread: the test is void"
    assert all(log["poise/phase"] == 0 for log in _step_logs(ours) if "poise/phase" in log)
    for p, q in zip(stock.model.parameters(), ours.model.parameters(), strict=True):
        assert torch.equal(p, q)
    # and the test can tell: stock TRL at the same learning rate lands elsewhere
    same_lr = run(GRPOTrainer, GRPOConfig, 0.1)
    assert any(not torch.equal(p, q) for p, q in zip(same_lr.model.parameters(), ours.model.parameters(), strict=True))


def test_pair_average_bootstrap_is_trls_advantage(tiny_model_path, tmp_path):
    """With `poise_target_mode="pair_average"` the bootstrap subtracts the probe's target, the pair's mean reward (the
    authors' reward − target): A_i = r_i − (r_i + r_j)/2, which is TRL's unscaled group advantage itself, so POISE and
    stock TRL at the same learning rate reach the same parameters, bit for bit (RLOO's r_i − r_j would double it)."""
    stock = _sgd_run(tmp_path, tiny_model_path, GRPOTrainer, GRPOConfig, 0.1)
    ours = _sgd_run(
        tmp_path,
        tiny_model_path,
        RLVRGRPOTrainer,
        RLVRGRPOConfig,
        0.1,
        value_baseline="poise",
        poise_bootstrap_steps=16,
        poise_target_mode="pair_average",
    )
    assert any(log["reward_std"] > 0 for log in _step_logs(stock)), "no reward spread: the test is void"
    assert all(log["poise/phase"] == 0 for log in _step_logs(ours) if "poise/phase" in log)
    for p, q in zip(stock.model.parameters(), ours.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_poise_trains_with_the_probe_after_the_bootstrap(tiny_model_path, tmp_path, monkeypatch):
    trainer = poise_trainer(tmp_path, tiny_model_path)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    seen = []
    original = trainer.method("poise").baseline.advantages

    def spy(rewards, prompt, response, scalars):
        result, predictions = original(rewards, prompt, response, scalars)
        seen.append((rewards, result, predictions))
        return result, predictions

    monkeypatch.setattr(trainer.method("poise").baseline, "advantages", spy)
    trainer.train()
    logs = [log for log in _step_logs(trainer) if "poise/phase" in log]
    assert [log["poise/phase"] for log in logs] == [0.0, 0.0, 1.0, 1.0]
    assert [log["poise/refit"] for log in logs] == [0.0, 1.0, 1.0, 1.0]
    assert [log["poise/buffer_rows"] for log in logs] == [8.0, 16.0, 24.0, 32.0]
    for name in ("pred_mean", "target_mean", "mae", "rmse", "pearson", "brier_skill", "pairwise_sign_acc"):
        assert all(f"poise/{name}" in log for log in logs[2:]) and not any(f"poise/{name}" in log for log in logs[:2])
    assert any(not torch.equal(p, q) for p, q in zip(before, trainer.model.parameters(), strict=True))
    # in the probe phase each rollout's advantage is its reward minus its sibling's prediction
    rewards, result, predictions = seen[-1]
    sibling = predictions.view(-1, 2).flip(-1).reshape(-1)
    torch.testing.assert_close(result.advantages, rewards - sibling)
    assert trainer.method("poise").baseline.retrain_count == 3


def test_the_features_are_the_chosen_layers_output_pooled(tiny_model_path, tmp_path):
    """The hook reads decoder layer `poise_layer`'s output: the model's hidden_states[layer + 1], pooled over the
    last n valid prompt and response tokens; the scalars are TRL's entropies averaged over the completion."""
    trainer = poise_trainer(tmp_path, tiny_model_path, poise_layer=0, poise_pool_n=3)
    trainer.model.train()
    output = trainer._generate_and_score_completions([dict(trainer.train_dataset[i]) for i in range(8)])
    features = trainer.method("poise").features(output)
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    trainer.model.eval()
    with torch.no_grad(), trainer.accelerator.autocast():  # TRL's forward runs under the trainer's autocast
        hidden = trainer.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[1]
    prompt_len, dim = output["prompt_ids"].size(1), hidden.size(-1)
    torch.testing.assert_close(features[:, :dim], pool_last_n(hidden[:, :prompt_len], output["prompt_mask"], 3))
    torch.testing.assert_close(
        features[:, dim : 2 * dim], pool_last_n(hidden[:, prompt_len:], output["completion_mask"], 3)
    )
    assert features.shape == (8, 2 * dim + 3) and (features[:, 2 * dim] > 0).all()  # mean output entropy


def test_resume_restores_the_probe_exactly(tiny_model_path, tmp_path):
    def train(resume=None):
        trainer = poise_trainer(tmp_path / "run", tiny_model_path, save_strategy="steps", save_steps=3)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = train()
    checkpoint = tmp_path / "run" / "checkpoint-3"
    assert (checkpoint / "poise_state_0.pth").is_file()
    saved = torch.load(checkpoint / "poise_state_0.pth", weights_only=True)
    assert saved["steps"] == 3 and saved["probe"] is not None  # the probe phase had begun
    resumed = train(resume=str(checkpoint))
    a, b = full.method("poise").baseline.state_dict(), resumed.method("poise").baseline.state_dict()
    assert a["steps"] == b["steps"] == 4 and a["retrain_count"] == b["retrain_count"]
    for key in a["buffer"]:
        assert torch.equal(a["buffer"][key], b["buffer"][key])
    for key in a["probe"]:
        assert torch.equal(a["probe"][key], b["probe"][key])
    for p, q in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_checkpoint_without_the_state_is_refused(tiny_model_path, tmp_path):
    args = GRPOConfig(**small_grpo_kwargs(tmp_path / "stock", max_steps=1, save_strategy="steps", save_steps=1))
    GRPOTrainer(model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()).train()
    trainer = poise_trainer(tmp_path / "ours", tiny_model_path, max_steps=2)
    with pytest.raises(FileNotFoundError, match="without value_baseline='poise'"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "stock" / "checkpoint-1"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_generations": 4}, "num_generations=2"),
        ({"scale_rewards": "group"}, "scale_rewards='none'"),
        ({"dynamic_sampling": True}, "dynamic_sampling"),
        ({"curation": "self", "remove_unused_columns": False}, "curation='self'"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "sum_then_normalize"),
        ({"poise_bootstrap_steps": 0}, "poise_bootstrap_steps"),
        ({"poise_prompt_pca": -1}, "poise_prompt_pca"),
        ({"poise_layer": True}, "poise_layer"),
        ({"poise_pool_n": 0}, "poise_pool_n"),
        ({"poise_alpha": 0.0}, "poise_alpha"),
        ({"poise_clip_min": 1.0}, "poise_clip_min"),
        ({"poise_buffer_rows": 1}, "poise_buffer_rows"),
        ({"poise_target_mode": "mean"}, "poise_target_mode"),
        ({"value_baseline": "critic"}, "value_baseline='critic'"),
    ],
)
def test_refusals(tmp_path, overrides, message):
    kwargs = small_grpo_kwargs(tmp_path, **{**POISE, **overrides})
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(**kwargs)


def test_a_layer_outside_the_model_is_refused(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match="poise_layer=7 is not a decoder layer"):
        poise_trainer(tmp_path, tiny_model_path, poise_layer=7)


def test_unscored_completions_are_refused(tiny_model_path, tmp_path):
    def none_reward(completions, **kwargs):
        return [None] * len(completions)

    trainer = poise_trainer(tmp_path, tiny_model_path, reward=none_reward, max_steps=1)
    with pytest.raises(ValueError, match="no reward function scored"):
        trainer.train()


def test_delta_nsr_and_rsi_act_on_poises_advantages(tiny_model_path, tmp_path, monkeypatch):
    """DelTA's weights are computed after POISE replaced the advantages (its hook runs after every mixin's), and the
    loss-side options (NSR, RSI-S) read the batch's advantages: a few steps train, in both phases."""
    from trl_rlvr_ext.grpo.methods import delta as delta_module

    trainer = poise_trainer(
        tmp_path,
        tiny_model_path,
        token_credit="delta",
        clip_recovery="nsr",
        rsi_selection="interval",
        rsi_low=0.0,
        num_iterations=2,
        max_steps=6,
    )
    replaced, read = [], []
    original_advantages, original_delta = trainer.method("poise").baseline.advantages, delta_module.delta_token_weights

    def spy_advantages(*args):
        result, predictions = original_advantages(*args)
        replaced.append(result.advantages)
        return result, predictions

    def spy_delta(hidden, logps, advantages, mask, **kwargs):
        read.append(advantages.detach().cpu())
        return original_delta(hidden, logps, advantages, mask, **kwargs)

    monkeypatch.setattr(trainer.method("poise").baseline, "advantages", spy_advantages)
    monkeypatch.setattr(delta_module, "delta_token_weights", spy_delta)
    trainer.train()
    assert len(replaced) == len(read) == 3  # one per generation batch (6 steps, each batch used twice)
    for ours, delta in zip(replaced, read, strict=True):
        assert torch.equal(ours, delta)
    logs = _step_logs(trainer)
    assert {log["poise/phase"] for log in logs if "poise/phase" in log} == {0.0, 1.0}
    assert all("token_credit/weight_mean" in log for log in logs[::2])
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_toy_poise_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    """The toy recipe parses with the authors' settings and trains two steps through the GRPO script (a dense reward:
    on the random tiny model the toy task's exact-match reward is 0 everywhere; a bootstrap of 1 so the probe runs)."""
    from test_acpo_recipes import FAST, ROOT, parse

    from trl_rlvr_ext.scripts import grpo as grpo_script

    argv = ["--config", str(ROOT / "recipes/grpo/toy_poise.yaml"), "--model_name_or_path", tiny_model_path]
    argv += ["--output_dir", str(tmp_path), *FAST, "--reward_funcs", "grpo_helpers.digit_reward"]
    argv += ["--num_generations", "2", "--poise_bootstrap_steps", "1", "--poise_warmup_steps", "1"]
    script_args, training_args, model_args, dataset_args = parse(argv)
    assert (training_args.value_baseline, training_args.num_generations, training_args.scale_rewards) == (
        "poise",
        2,
        "none",
    )
    assert (training_args.poise_prompt_pca, training_args.poise_response_pca, training_args.poise_alpha) == (
        32,
        64,
        100.0,
    )
    assert training_args.poise_layer is None and training_args.poise_buffer_rows == 4096
    trainer = grpo_script.main(script_args, training_args, model_args, dataset_args)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert [log["poise/phase"] for log in logs] == [0.0, 1.0]


def test_poise_with_a_lora_adapter_and_evaluation(tiny_model_path, tmp_path, monkeypatch):
    """Under PEFT the hook sits on the wrapped model's decoder layer; evaluation batches keep TRL's advantages and
    never reach the probe (its buffer grows by the training batches only)."""
    from peft import LoraConfig

    args = RLVRGRPOConfig(
        **small_grpo_kwargs(
            tmp_path,
            **POISE,
            max_steps=3,
            learning_rate=1e-3,
            eval_strategy="steps",
            eval_steps=3,
            per_device_eval_batch_size=4,
        )
    )
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(),
        eval_dataset=prompt_dataset(4),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    assert (
        trainer.method("poise").layer_module
        is trainer.model.get_base_model().model.layers[trainer.method("poise").layer]
    )
    trainer.train()
    logs = [log for log in _step_logs(trainer) if "poise/phase" in log]
    assert [log["poise/phase"] for log in logs] == [0.0, 0.0, 1.0]
    assert (
        trainer.method("poise").baseline.buffer["targets"].shape[0] == 3 * 8
        and trainer.method("poise").baseline.steps == 3
    )
    evaluations = [log for log in trainer.state.log_history if "eval_loss" in log]
    assert evaluations and not any(key.startswith("eval_poise/") for key in evaluations[0])
