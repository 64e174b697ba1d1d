"""ISDPOTrainer: stock DPO when off, the IS-DAA loss when on, the behaviour columns, and training on the tiny model."""

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer

from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer
from trl_rlvr_ext.dpo.behavior import BEHAVIOR_COLUMNS, score_behavior_logps
from trl_rlvr_ext.losses import is_daa_weights
from trl_rlvr_ext.toy import make_model, make_tokenizer
from trl_rlvr_ext.toy.preference import make_toy_preference_dataset


TIMING_KEYS = {"train_runtime", "train_samples_per_second", "train_steps_per_second"}


def _kwargs(tmp_path, **overrides):
    kwargs = {
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": 4,
        "max_steps": 3,
        "learning_rate": 1e-2,  # large on purpose: the policy leaves the reference within a step, so w != 1
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "max_length": 32,
        "seed": 0,
    }
    kwargs.update(overrides)
    return kwargs


def _dataset(n=16, seed=0):
    return make_toy_preference_dataset(n, seed=seed)


def _with_behavior(dataset, chosen, rejected):
    return dataset.add_column(BEHAVIOR_COLUMNS[0], list(chosen)).add_column(BEHAVIOR_COLUMNS[1], list(rejected))


def _record_losses(trainer):
    """Keep the exact loss tensor of every `compute_loss` call (log_history rounds nothing, but averages)."""
    losses, original = [], trainer.compute_loss

    def compute_loss(*args, **kwargs):
        loss = original(*args, **kwargs)
        losses.append(loss.detach().clone())
        return loss

    trainer.compute_loss = compute_loss
    return losses


def _logged(trainer):
    return [{k: v for k, v in log.items() if k not in TIMING_KEYS} for log in trainer.state.log_history]


# The copy of TRL's _compute_loss (trl_rlvr_ext/_trl/) is checked against TRL's source in tests/test_trl_copies.py.


# ---------------------------------------------------------------- off: stock DPO to the bit
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {
            "loss_type": ["sigmoid", "bco_pair", "sft"],
            "loss_weights": [0.8, 0.2, 1.0],
            "precompute_ref_log_probs": True,
        },
    ],
    ids=["sigmoid", "mpo_mixture_precomputed"],
)
def test_importance_sampling_off_is_stock_dpo(tiny_model_path, tmp_path, overrides):
    dataset = _dataset()
    # Behaviour columns in the data must be ignored (pruned) exactly as stock TRL prunes unknown columns
    dataset = _with_behavior(dataset, [-1.0] * len(dataset), [-2.0] * len(dataset))
    runs = []
    for trainer_cls, config_cls, extra in (
        (DPOTrainer, DPOConfig, {}),
        (ISDPOTrainer, ISDPOConfig, {"importance_sampling": False}),
    ):
        args = config_cls(**_kwargs(tmp_path / trainer_cls.__name__, max_steps=4, **overrides, **extra))
        trainer = trainer_cls(tiny_model_path, args=args, train_dataset=dataset)
        losses = _record_losses(trainer)
        trainer.train()
        runs.append((losses, dict(trainer.model.named_parameters()), _logged(trainer)))
    (stock_losses, stock_params, stock_logs), (our_losses, our_params, our_logs) = runs
    assert len(stock_losses) == len(our_losses) == 4
    for stock, ours in zip(stock_losses, our_losses, strict=True):
        assert torch.equal(stock, ours)
    assert stock_params.keys() == our_params.keys()
    for name, param in stock_params.items():
        assert torch.equal(param, our_params[name]), name
    assert stock_logs == our_logs
    assert not any(key.startswith("is/") for log in our_logs for key in log)


# ---------------------------------------------------------------- on: mean(w · stock per-pair loss)
def _sequence_logps(model, batch):
    """Sequence log-prob sums of the completion tokens, by a plain forward (no TRL code)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    token_logps = logits.float().log_softmax(-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["completion_mask"][:, 1:].float()
    return (token_logps * mask).sum(1), mask.sum(1), token_logps, mask


def _first_batch_logps(trainer, reference):
    """The trainer's first train batch, and the policy's and reference's sequence log-probs on it."""
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    with torch.no_grad():
        pol, lengths, token_logps, mask = _sequence_logps(trainer.model, batch)
        ref, _, _, _ = _sequence_logps(reference, batch)
    return batch, pol, ref, lengths, token_logps, mask


def _per_pair_losses(loss_type, beta, label_smoothing, pol, ref, lengths, token_logps, mask):
    """Stock DPO per-pair losses, written from the papers' equations (TRL's conventions)."""
    pc, pr = pol.chunk(2)
    rc, rr = ref.chunk(2)
    lc, lr = lengths.chunk(2)
    h = (pc - rc) - (pr - rr)
    if loss_type == "sigmoid":
        return -F.logsigmoid(beta * h)
    if loss_type == "ipo":  # TRL length-normalises the log-ratios
        return ((pc - rc) / lc - (pr - rr) / lr - 1 / (2 * beta)) ** 2
    if loss_type == "hinge":
        return torch.relu(1 - beta * h)
    if loss_type == "robust":
        eps = label_smoothing
        return (-(1 - eps) * F.logsigmoid(beta * h) + eps * F.logsigmoid(-beta * h)) / (1 - 2 * eps)
    if loss_type == "bco_pair":
        return -F.logsigmoid(beta * (pc - rc)) - F.logsigmoid(-beta * (pr - rr))
    if loss_type == "sft":  # token mean over the chosen completions of the batch, the same for every pair
        chosen_tokens, chosen_mask = token_logps.chunk(2)[0], mask.chunk(2)[0]
        return (-(chosen_tokens * chosen_mask).sum() / chosen_mask.sum()).expand(pc.shape[0])
    raise AssertionError(loss_type)


@pytest.mark.parametrize(
    "loss_type, loss_weights, label_smoothing",
    [
        (["sigmoid"], None, 0.0),
        (["ipo"], None, 0.0),
        (["hinge"], None, 0.0),
        (["robust"], None, 0.1),
        (["sigmoid", "bco_pair", "sft"], [0.8, 0.2, 1.0], 0.0),  # MPO-style mixture
    ],
    ids=["sigmoid", "ipo", "hinge", "robust", "mpo_mixture"],
)
def test_loss_is_weighted_mean_of_stock_per_pair_losses(tmp_path, loss_type, loss_weights, label_smoothing):
    tokenizer = make_tokenizer()
    policy, reference = make_model(tokenizer, seed=0), make_model(tokenizer, seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # π_ref = π_θ + noise: the ratios scatter around 1 on both sides
        for param in reference.parameters():
            param.add_(0.3 * param.std() * torch.randn(param.shape, generator=generator))
    args = ISDPOConfig(
        **_kwargs(tmp_path, per_device_train_batch_size=8),
        loss_type=loss_type,
        loss_weights=loss_weights,
        label_smoothing=label_smoothing,
        beta=0.1,
    )
    trainer = ISDPOTrainer(
        policy, ref_model=reference, args=args, train_dataset=_dataset(8), processing_class=tokenizer
    )
    batch, pol, ref, lengths, token_logps, mask = _first_batch_logps(trainer, reference)
    pc, pr = pol.chunk(2)
    rc, rr = ref.chunk(2)
    raw = torch.exp((pc - rc) + (pr - rr))  # π_D = π_ref: no behaviour columns
    # Put the cap between two middle weights (away from any weight), so the batch has clipped and unclipped pairs
    above_one = raw[raw > 1].sort().values
    assert len(above_one) >= 2, raw
    trainer.args.importance_weight_cap = ((above_one[0] + above_one[1]) / 2).item()
    weights = torch.clamp(raw, max=trainer.args.importance_weight_cap).clamp(min=trainer.args.importance_weight_floor)
    assert 0 < (raw > trainer.args.importance_weight_cap).sum() < len(raw) and weights.std() > 0.01

    expected = sum(
        weight * (weights * _per_pair_losses(lt, 0.1, label_smoothing, pol, ref, lengths, token_logps, mask)).mean()
        for lt, weight in zip(loss_type, loss_weights or [1.0], strict=True)
    )
    loss = trainer.compute_loss(trainer.model, batch)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    floor = trainer.args.importance_weight_floor
    torch.testing.assert_close(is_daa_weights(pc, pr, rc, rr, trainer.args.importance_weight_cap, floor), weights)
    metrics = trainer._metrics["train" if trainer.model.training else "eval"]
    assert metrics["is/weight_mean"][-1] == pytest.approx(weights.mean().item(), rel=1e-5)
    assert metrics["is/clipped_frac"][-1] == pytest.approx(
        (raw > trainer.args.importance_weight_cap).float().mean().item()
    )
    ess = weights.sum() ** 2 / (len(weights) * (weights**2).sum())
    assert metrics["is/ess"][-1] == pytest.approx(ess.item(), rel=1e-5)


def test_behavior_columns_set_the_weights(tiny_model_path, tmp_path):
    """π_D from the data: behaviour = policy + known offsets, so at step 0 (π_θ = π_ref) w = exp(min(-Σoffsets, log C))
    and the sigmoid loss of every pair is log 2: the loss is log 2 · mean(w), by hand."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    dataset = _dataset(8)
    scored = score_behavior_logps(dataset, model, tokenizer, max_length=32, show_progress=False)
    offsets_chosen = torch.tensor([0.3, -0.2, 0.1, -1.0, 0.0, 0.25, -0.5, 2.0])
    offsets_rejected = torch.tensor([0.0, 0.1, -0.4, 0.5, -2.0, 0.25, 0.0, 0.5])
    chosen = torch.tensor(scored[BEHAVIOR_COLUMNS[0]]) + offsets_chosen
    rejected = torch.tensor(scored[BEHAVIOR_COLUMNS[1]]) + offsets_rejected
    dataset = _with_behavior(dataset, chosen.tolist(), rejected.tolist())
    cap = 1.5
    args = ISDPOConfig(**_kwargs(tmp_path, per_device_train_batch_size=8), importance_weight_cap=cap)
    trainer = ISDPOTrainer(tiny_model_path, args=args, train_dataset=dataset)
    trainer.model.train()  # the training loss (from_pretrained leaves the model in eval mode: TRL's unweighted loss)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    assert set(BEHAVIOR_COLUMNS) <= set(batch)  # survived dataset preparation, column pruning and the collator
    weights = torch.exp(torch.clamp(-(offsets_chosen + offsets_rejected), max=math.log(cap)))
    loss = trainer.compute_loss(trainer.model, batch)
    torch.testing.assert_close(loss, math.log(2) * weights.mean(), rtol=1e-4, atol=1e-5)
    metrics = trainer._metrics["train" if trainer.model.training else "eval"]
    assert metrics["is/clipped_frac"][-1] == pytest.approx(3 / 8)  # pairs 3, 4 and 6 are above log 1.5


def test_authors_behavior_columns_are_used_when_named_and_never_silently_ignored(tiny_model_path, tmp_path):
    """Data prepared for the IS-DAA authors' code carries π_D as `chosen_logps` / `rejected_logps`. Unset
    `behavior_logps_columns` refuses such data (it used to train with π_D = π_ref without a word); naming the columns
    reads π_D from them (weights by hand, as above); "none" explicitly trains with π_D = π_ref (every weight 1)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    dataset = _dataset(8)
    scored = score_behavior_logps(dataset, model, tokenizer, max_length=32, show_progress=False)
    offsets = torch.tensor([0.3, -0.2, 0.1, -1.0, 0.0, 0.25, -0.5, 2.0])
    chosen = (torch.tensor(scored[BEHAVIOR_COLUMNS[0]]) + offsets).tolist()
    rejected = torch.tensor(scored[BEHAVIOR_COLUMNS[1]]).tolist()
    authors = dataset.add_column("chosen_logps", chosen).add_column("rejected_logps", rejected)

    def build(train, **overrides):
        args = ISDPOConfig(**_kwargs(tmp_path, per_device_train_batch_size=8), importance_weight_cap=1.5, **overrides)
        return ISDPOTrainer(tiny_model_path, args=args, train_dataset=train)

    def step0_loss(trainer):
        trainer.model.train()  # the training loss, weighted (an eval-mode model gives TRL's unweighted eval loss)
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        return trainer.compute_loss(trainer.model, batch), batch

    with pytest.raises(ValueError, match=r"'chosen_logps', 'rejected_logps'.*behavior_logps_columns"):
        build(authors)
    loss, batch = step0_loss(build(authors, behavior_logps_columns=["chosen_logps", "rejected_logps"]))
    torch.testing.assert_close(batch[BEHAVIOR_COLUMNS[0]].sort().values, torch.tensor(chosen).sort().values)
    weights = torch.exp(torch.clamp(-offsets, max=math.log(1.5)))
    torch.testing.assert_close(loss, math.log(2) * weights.mean(), rtol=1e-4, atol=1e-5)
    loss, batch = step0_loss(build(authors, behavior_logps_columns="none"))
    assert not set(BEHAVIOR_COLUMNS) & set(batch)
    torch.testing.assert_close(loss, torch.tensor(math.log(2)), rtol=1e-4, atol=1e-5)

    # the standard columns beside the authors': still a question to answer, not a silent choice
    both = _with_behavior(authors, chosen, rejected)
    with pytest.raises(ValueError, match="which are used"):
        build(both)
    with pytest.raises(ValueError, match="two sources"):
        build(both, behavior_logps_columns=["chosen_logps", "rejected_logps"])
    build(both, behavior_logps_columns=list(BEHAVIOR_COLUMNS))
    with pytest.raises(ValueError, match=r"names the column\(s\) \['chosen_logps', 'rejected_logps'\]"):
        build(dataset, behavior_logps_columns=["chosen_logps", "rejected_logps"])
    with pytest.raises(ValueError, match="must name two different dataset columns"):
        ISDPOConfig(**_kwargs(tmp_path), behavior_logps_columns=["chosen_logps"])
    # importance sampling off: stock TRL, the option is not consulted
    build(authors, importance_sampling=False)


# ---------------------------------------------------------------- behaviour scorer == TRL's reference log-probs
@pytest.mark.parametrize("conversational, max_length", [(False, 8), (True, None)], ids=["standard_truncated", "chat"])
def test_scorer_reproduces_trl_precomputed_reference_logps(tiny_model_path, tmp_path, conversational, max_length):
    dataset = _dataset(12, seed=3)
    if conversational:
        dataset = dataset.map(
            lambda row: {
                "prompt": [{"role": "user", "content": row["prompt"]}],
                "chosen": [{"role": "assistant", "content": row["chosen"]}],
                "rejected": [{"role": "assistant", "content": row["rejected"]}],
            }
        )
    args = DPOConfig(**{**_kwargs(tmp_path, max_length=max_length), "precompute_ref_log_probs": True})
    trainer = DPOTrainer(tiny_model_path, args=args, train_dataset=dataset)
    assert len(trainer.train_dataset) == len(dataset)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    scored = score_behavior_logps(dataset, model, tokenizer, batch_size=5, max_length=max_length, show_progress=False)
    assert scored.column_names == [*dataset.column_names, *BEHAVIOR_COLUMNS]
    for ours, trls in zip(BEHAVIOR_COLUMNS, ("ref_chosen_logps", "ref_rejected_logps"), strict=True):
        torch.testing.assert_close(
            torch.tensor(scored[ours]), torch.tensor(trainer.train_dataset[trls]), rtol=1e-5, atol=1e-5
        )
    # The model's forward is restored after scoring (TRL's fused head is attached only while scoring)
    assert "forward" not in model.__dict__
    with pytest.raises(ValueError, match="overwrite"):
        score_behavior_logps(scored, model, tokenizer, show_progress=False)


# ---------------------------------------------------------------- training on the tiny model (TRL's test pattern)
def _train_and_check(trainer):
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
    logged = {key for log in trainer.state.log_history for key in log}
    assert {"is/weight_mean", "is/weight_max", "is/clipped_frac", "is/ess", "rewards/margins"} <= logged
    for name, param in trainer.model.named_parameters():
        if name in before:
            assert not torch.equal(param, before[name]), f"{name} did not change"


def test_training_full_finetune_with_ref_model(tmp_path):
    tokenizer = make_tokenizer()
    args = ISDPOConfig(**_kwargs(tmp_path))
    trainer = ISDPOTrainer(
        make_model(tokenizer),
        ref_model=make_model(tokenizer, seed=1),
        args=args,
        train_dataset=_dataset(),
        processing_class=tokenizer,
    )
    _train_and_check(trainer)
    assert any(log.get("is/weight_mean", 1.0) != 1.0 for log in trainer.state.log_history)


def test_training_precomputed_reference(tiny_model_path, tmp_path):
    args = ISDPOConfig(**_kwargs(tmp_path, precompute_ref_log_probs=True))
    trainer = ISDPOTrainer(tiny_model_path, args=args, train_dataset=_dataset())
    assert trainer.ref_model is None and "ref_chosen_logps" in trainer.train_dataset.column_names
    _train_and_check(trainer)


@pytest.mark.parametrize("ref_adapter", [False, True], ids=["adapter_disabled_ref", "ref_adapter"])
def test_training_peft_lora(tiny_model_path, tmp_path, ref_adapter):
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    args = ISDPOConfig(**_kwargs(tmp_path, max_steps=4))
    if ref_adapter:  # a PeftModel without peft_config: TRL copies the adapter to a frozen "ref" adapter
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_path), lora)
        trainer = ISDPOTrainer(model, args=args, train_dataset=_dataset())
        assert "ref" in trainer.model.peft_config
    else:
        trainer = ISDPOTrainer(tiny_model_path, args=args, train_dataset=_dataset(), peft_config=lora)
        assert "ref" not in trainer.model.peft_config
    _train_and_check(trainer)


def test_training_with_behavior_columns_and_evaluate(tiny_model_path, tmp_path):
    def with_columns(dataset, shift):
        n = len(dataset)
        return _with_behavior(dataset, [-60.0 + shift * (i % 3) for i in range(n)], [-61.0] * n)

    args = ISDPOConfig(**_kwargs(tmp_path, precompute_ref_log_probs=True, importance_weight_cap=math.exp(2.0)))
    trainer = ISDPOTrainer(
        tiny_model_path,
        ref_model=AutoModelForCausalLM.from_pretrained(tiny_model_path),
        args=args,
        train_dataset=with_columns(_dataset(), 1.0),
    )
    assert set(BEHAVIOR_COLUMNS) <= set(trainer.train_dataset.column_names)
    _train_and_check(trainer)
    # Step 1: π_θ = π_ref, yet w ≠ 1: π_D (the columns, ≈ e^-60) is far below π_θ (≈ e^-18), log w ≫ 2, so w = e^2
    assert trainer.state.log_history[0]["is/weight_mean"] == pytest.approx(math.exp(2.0), rel=1e-4)
    # A dataset handed to evaluate() later is prepared, precomputed and weighted the same way
    metrics = trainer.evaluate(eval_dataset=with_columns(_dataset(8, seed=5), 0.5))
    assert "eval_is/weight_mean" in metrics and "eval_loss" in metrics


# ---------------------------------------------------------------- collapsed weights: floored, warned, logged
def _far_policy_and_reference(tokenizer, scale=200.0):
    """A policy away from its reference on every pair: its logits are the reference's × `scale`. At 200 each sequence
    of the toy data loses hundreds of nats and log w ≈ −220 to −400 (exp underflows to exactly 0 in float32 below
    −104): what a large policy move does to the weights when π_D = π_ref."""
    policy, reference = make_model(tokenizer, seed=0), make_model(tokenizer, seed=0)
    with torch.no_grad():
        policy.lm_head.weight.mul_(scale)
    return policy, reference


@pytest.mark.parametrize("floor", [0.0, None], ids=["authors_no_floor", "default_floor"])
def test_collapsed_weights_are_floored_warned_and_logged(tmp_path, caplog, floor):
    tokenizer = make_tokenizer()
    policy, reference = _far_policy_and_reference(tokenizer)
    extra = {} if floor is None else {"importance_weight_floor": floor}
    args = ISDPOConfig(**_kwargs(tmp_path, per_device_train_batch_size=8, max_steps=2), beta=0.1, **extra)
    assert args.importance_weight_floor == (2**-8 if floor is None else 0.0)
    trainer = ISDPOTrainer(
        policy, ref_model=reference, args=args, train_dataset=_dataset(8), processing_class=tokenizer
    )
    trainer.model.train()
    batch, pol, ref, lengths, token_logps, mask = _first_batch_logps(trainer, reference)
    pc, pr = pol.chunk(2)
    rc, rr = ref.chunk(2)
    assert ((pc - rc) + (pr - rr) < -150).all()  # every weight underflows: exp(-150) == 0 in float32
    per_pair = _per_pair_losses("sigmoid", 0.1, 0.0, pol, ref, lengths, token_logps, mask)
    assert per_pair.mean() > 0.5  # DPO itself still has plenty to learn (its loss is far from 0)

    with caplog.at_level("WARNING", logger="trl_rlvr_ext.dpo.dpo_trainer"):
        loss = trainer.compute_loss(trainer.model, batch)
        trainer.compute_loss(trainer.model, batch)  # once per mode: no second warning
    metrics = trainer._metrics["train"]
    messages = [r.getMessage() for r in caplog.records if r.name == "trl_rlvr_ext.dpo.dpo_trainer"]
    assert len(messages) == 1, messages
    message = messages[0]
    assert "collapsed (train, step 0): 100% of the pairs" in message and "the reference policy" in message
    assert "behavior_chosen_logps / behavior_rejected_logps" in message and "trl-rlvr-ext score-behavior" in message
    if floor == 0.0:  # the authors' weight: the loss is exactly 0, and so is every gradient
        assert loss.item() == 0.0 and metrics["is/weight_mean"][-1] == 0.0
        assert metrics["is/floored_frac"][-1] == 0.0 and "importance_weight_floor=0," in message
    else:  # every pair weighs F = 2^-8: the loss is F · mean(ℓ), by hand
        torch.testing.assert_close(loss, 2**-8 * per_pair.mean(), rtol=1e-5, atol=0)
        assert metrics["is/weight_mean"][-1] == 2**-8 and metrics["is/floored_frac"][-1] == 1.0
        assert "keeps each of them at 0.003906 times DPO's step" in message

    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    train_loss = trainer.state.log_history[-1]["train_loss"]
    if floor == 0.0:  # silently stopped, but for the warning above
        assert changed == [] and train_loss == 0.0
    else:
        assert "lm_head.weight" in changed and train_loss > 0.0
        assert all(log["is/floored_frac"] > 0.5 for log in trainer.state.log_history if "is/floored_frac" in log)


def test_eval_loss_is_stock_dpo_unless_the_weighted_one_is_asked_for(tmp_path):
    """eval_loss equals stock TRL's DPO eval loss, bit for bit, on a policy whose weights are far from 1 (else the test
    could not fail); the weighted loss is `eval_is/weighted_loss`, and eval_loss with importance_weighted_eval_loss."""
    tokenizer = make_tokenizer()
    eval_dataset = _dataset(8, seed=5)

    def evaluate(trainer_cls, config_cls, **extra):
        policy, reference = _far_policy_and_reference(tokenizer, scale=3.0)  # weights well below 1, above the floor
        args = config_cls(**_kwargs(tmp_path / trainer_cls.__name__, per_device_eval_batch_size=4), **extra)
        trainer = trainer_cls(
            policy, ref_model=reference, args=args, train_dataset=_dataset(8), eval_dataset=eval_dataset,
            processing_class=tokenizer,
        )  # fmt: skip
        return trainer.evaluate()

    stock = evaluate(DPOTrainer, DPOConfig)
    ours = evaluate(ISDPOTrainer, ISDPOConfig)
    weighted = evaluate(ISDPOTrainer, ISDPOConfig, importance_weighted_eval_loss=True)
    assert ours["eval_loss"] == stock["eval_loss"]
    assert ours["eval_is/weight_mean"] < 0.8 and ours["eval_is/floored_frac"] < 0.5  # a weighted eval loss differs
    assert abs(ours["eval_is/weighted_loss"] - ours["eval_loss"]) > 1e-3
    # The weighted eval loss is the metric of the default run, and training's weighted loss
    assert weighted["eval_loss"] == pytest.approx(ours["eval_is/weighted_loss"], rel=1e-6)
    assert weighted["eval_is/weighted_loss"] == pytest.approx(weighted["eval_loss"], rel=1e-6)
    for key in ("rewards/margins", "is/weight_mean", "is/ess"):
        assert ours[f"eval_{key}"] == weighted[f"eval_{key}"]


def test_weight_floor_and_eval_options_are_checked(tmp_path):
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="importance_weight_floor=.* must be in \\[0, 1\\]"):
            ISDPOConfig(**_kwargs(tmp_path), importance_weight_floor=bad)
    with pytest.raises(TypeError, match="importance_weighted_eval_loss must be True or False"):
        ISDPOConfig(**_kwargs(tmp_path), importance_weighted_eval_loss="yes")
    assert ISDPOConfig(**_kwargs(tmp_path), importance_weight_floor=1).importance_weight_floor == 1.0


# ---------------------------------------------------------------- bad input: clear errors, no silent fallback
@pytest.mark.parametrize(
    "values, message",
    [
        ([-1.0, None, -2.0, -3.0], r"'behavior_rejected_logps'.*row 1: missing"),
        ([-1.0, -2.0, float("nan"), -3.0], r"'behavior_rejected_logps'.*row 2: NaN"),
        ([-1.0, -2.0, -3.0, float("inf")], r"'behavior_rejected_logps'.*row 3: \+inf"),
        ([-1.0, 5.0, -3.0, -4.0], r"row 1: 5.0 > 0"),
    ],
    ids=["missing", "nan", "inf", "positive"],
)
def test_bad_behavior_values_are_rejected_with_row_and_column(tmp_path, values, message):
    dataset = _with_behavior(_dataset(4), [-1.0] * 4, values)
    tokenizer = make_tokenizer()
    with pytest.raises(ValueError, match=message):
        ISDPOTrainer(
            make_model(tokenizer), ref_model=make_model(tokenizer), args=ISDPOConfig(**_kwargs(tmp_path)),
            train_dataset=dataset, processing_class=tokenizer,
        )  # fmt: skip


def test_dataset_errors(tmp_path):
    tokenizer = make_tokenizer()

    def build(train, **kwargs):
        return ISDPOTrainer(
            make_model(tokenizer), ref_model=make_model(tokenizer), args=ISDPOConfig(**_kwargs(tmp_path, **kwargs)),
            train_dataset=train, processing_class=tokenizer,
        )  # fmt: skip

    one_column = _dataset(4).add_column(BEHAVIOR_COLUMNS[0], [-1.0] * 4)
    with pytest.raises(ValueError, match="has the column 'behavior_chosen_logps' but not 'behavior_rejected_logps'"):
        build(one_column)
    as_strings = _with_behavior(_dataset(4), ["-1"] * 4, ["-2"] * 4)
    with pytest.raises(ValueError, match="must hold floats"):
        build(as_strings)
    with pytest.raises(ValueError, match="sync_ref_model"):
        build(_dataset(4), sync_ref_model=True)
    # Train with behaviour columns, eval without: the two losses would use different behaviour policies
    trainer = ISDPOTrainer(
        make_model(tokenizer), ref_model=make_model(tokenizer), args=ISDPOConfig(**_kwargs(tmp_path)),
        train_dataset=_with_behavior(_dataset(4), [-1.0] * 4, [-1.0] * 4), processing_class=tokenizer,
    )  # fmt: skip
    with pytest.raises(ValueError, match="but the 'eval' dataset does not"):
        trainer.evaluate(eval_dataset=_dataset(4))
    from trl import GRPOConfig

    with pytest.raises(
        TypeError,
        match=r"needs `args` to be a trl_rlvr_ext.ISDPOConfig \(or a plain trl.DPOConfig\), got trl.GRPOConfig",
    ):
        ISDPOTrainer(make_model(tokenizer), args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True))


def test_a_plain_dpo_config_runs_as_isdpo_with_its_defaults(tiny_model_path, tmp_path, caplog):
    """Changing only the trainer import works: a plain trl.DPOConfig becomes an ISDPOConfig with every field kept and
    IS-DAA at its defaults (on, the paper's cap), said once in the log, and the run equals one with that ISDPOConfig."""
    runs = []
    for args in (ISDPOConfig(**_kwargs(tmp_path / "ours")), DPOConfig(**_kwargs(tmp_path / "plain"))):
        with caplog.at_level("WARNING", logger="trl_rlvr_ext.config"):
            trainer = ISDPOTrainer(tiny_model_path, args=args, train_dataset=_dataset())
        losses = _record_losses(trainer)
        trainer.train()
        runs.append((trainer, args, losses))
    (reference, _, reference_losses), (converted, plain_args, converted_losses) = runs
    assert type(converted.args) is ISDPOConfig and converted.args.importance_sampling
    from trl_rlvr_ext.dpo.dpo_config import IMPORTANCE_WEIGHT_CAP_DEFAULT

    assert converted.args.importance_weight_cap == IMPORTANCE_WEIGHT_CAP_DEFAULT
    plain = plain_args.to_dict()
    assert {k: v for k, v in converted.args.to_dict().items() if k in plain} == plain
    messages = [r.getMessage() for r in caplog.records if r.name == "trl_rlvr_ext.config"]
    assert len(messages) == 1 and "plain trl.DPOConfig" in messages[0] and "importance_sampling=False" in messages[0]
    assert len(reference_losses) == len(converted_losses) == 3
    assert all(torch.equal(a, b) for a, b in zip(reference_losses, converted_losses))
    strip = [{k: v for k, v in log.items() if k != "epoch"} for log in _logged(reference)]
    assert strip == [{k: v for k, v in log.items() if k != "epoch"} for log in _logged(converted)]
    assert any(log.get("is/weight_mean", 1.0) != 1.0 for log in _logged(converted)), "weights all 1: void"
    for (name, param), (_, other) in zip(reference.model.named_parameters(), converted.model.named_parameters()):
        assert torch.equal(param, other), name


def test_streaming_dataset_bad_row_is_named(tmp_path):
    values = [-1.0, -1.0, -1.0, float("nan")] + [-1.0] * 4
    stream = _with_behavior(_dataset(8), [-1.0] * 8, values).to_iterable_dataset()
    tokenizer = make_tokenizer()
    trainer = ISDPOTrainer(
        make_model(tokenizer), ref_model=make_model(tokenizer), args=ISDPOConfig(**_kwargs(tmp_path)),
        train_dataset=stream, processing_class=tokenizer,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"'behavior_rejected_logps'.*row 3: NaN"):
        trainer.train()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"importance_weight_cap": 0.5}, "must be ≥ 1"),
        ({"importance_weight_cap": float("nan")}, "must be ≥ 1"),
        ({"loss_type": ["aot"]}, "sort the batch"),
        ({"loss_type": ["sigmoid", "aot_unpaired"], "loss_weights": [1.0, 1.0]}, "sort the batch"),
        ({"ld_alpha": 0.5}, "ld_alpha"),
        ({"learning_rate": -0.1}, "learning_rate must be >= 0"),
        ({"per_device_train_batch_size": 0}, "per_device_train_batch_size must be a whole number >= 1"),
        ({"per_device_eval_batch_size": -1}, "per_device_eval_batch_size must be a whole number >= 1"),
    ],
)
def test_config_rejects_invalid_values(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        ISDPOConfig(**_kwargs(tmp_path, **overrides))
    # With importance sampling off, TRL's own options stay available
    if not {"importance_weight_cap", "learning_rate"} & set(overrides) and "must be a whole number" not in message:
        ISDPOConfig(**_kwargs(tmp_path, importance_sampling=False, **overrides))


def test_config_defaults_are_the_papers():
    args = ISDPOConfig(output_dir="unused", use_cpu=True)
    assert args.importance_sampling is True
    assert args.importance_weight_cap == pytest.approx(math.exp(0.5))
    # Not the paper's (no lower bound there): 2^-8, and eval_loss is TRL's unweighted one
    assert args.importance_weight_floor == 2**-8 and args.importance_weighted_eval_loss is False
    assert (
        ISDPOConfig(output_dir="unused", use_cpu=True, importance_weight_cap=float("inf")).importance_weight_cap
        == math.inf
    )


# ---------------------------------------------------------------- two processes: is/* over the pairs of all ranks
_DDP_SCRIPT = """
import json, os, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer
from trl_rlvr_ext.dpo.behavior import BEHAVIOR_COLUMNS, score_behavior_logps
from trl_rlvr_ext.toy.preference import make_toy_preference_dataset

model_path, out_dir = sys.argv[1:3]
dataset = make_toy_preference_dataset(8, seed=0)
model, tokenizer = AutoModelForCausalLM.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path)
scored = score_behavior_logps(dataset, model, tokenizer, max_length=32, show_progress=False)
# π_D = π_θ (= π_ref at step 0) except on row 0, where π_D is 5 nats lower: w = C there, 1 everywhere else
chosen = list(scored[BEHAVIOR_COLUMNS[0]])
chosen[0] -= 5.0
dataset = dataset.add_column(BEHAVIOR_COLUMNS[0], chosen).add_column(BEHAVIOR_COLUMNS[1], scored[BEHAVIOR_COLUMNS[1]])
args = ISDPOConfig(
    output_dir=out_dir, per_device_train_batch_size=4, use_cpu=True, bf16=False, report_to="none",
    activation_checkpointing=False, max_length=32, importance_weight_cap=2.0, seed=0,
)
trainer = ISDPOTrainer(model_path, args=args, train_dataset=dataset)
batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
trainer.compute_loss(trainer.model, batch)
metrics = trainer._metrics["train" if trainer.model.training else "eval"]
result = {
    "world_size": trainer.accelerator.num_processes,
    "local_pairs": batch[BEHAVIOR_COLUMNS[0]].numel(),
    "metrics": {key: values[-1] for key, values in metrics.items() if key.startswith("is/")},
}
with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
    json.dump(result, f)
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)  # gloo may abort at interpreter exit after the work is done (tests/distributed/clean_exit.py)
"""


@pytest.mark.distributed
def test_is_metrics_are_gathered_across_processes(tiny_model_path, tmp_path):
    script = tmp_path / "is_dpo_ddp.py"
    script.write_text(_DDP_SCRIPT)
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "1"}
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", str(script), tiny_model_path, str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(r["world_size"] == 2 and r["local_pairs"] == 4 for r in ranks)
    # Over all 8 pairs: seven weights of 1 and one of C = 2. A rank-local value would be 1 or 1.25, never 1.125.
    for r in ranks:
        assert r["metrics"]["is/weight_mean"] == pytest.approx(9 / 8, rel=1e-4)
        assert r["metrics"]["is/clipped_frac"] == pytest.approx(1 / 8)
        assert r["metrics"]["is/weight_max"] == pytest.approx(2.0, rel=1e-5)
        assert r["metrics"]["is/ess"] == pytest.approx(81 / 88, rel=1e-4)


def test_the_deprecated_is_weight_max_still_sets_the_cap_for_one_release(tmp_path):
    with pytest.warns(FutureWarning, match="is_weight_max is deprecated.*importance_weight_cap"):
        args = ISDPOConfig(**_kwargs(tmp_path), is_weight_max=2.0)
    assert args.importance_weight_cap == 2.0 and args.is_weight_max is None
    with pytest.raises(ValueError, match="disagree"):
        ISDPOConfig(**_kwargs(tmp_path), is_weight_max=2.0, importance_weight_cap=3.0)
    with pytest.raises(ValueError, match="must be ≥ 1"), pytest.warns(FutureWarning):
        ISDPOConfig(**_kwargs(tmp_path), is_weight_max=0.5)
