"""Dynamic sampling: the trainer-free rule (exact values) and the trainer adapter on the tiny model."""

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from datasets import Dataset
from grpo_helpers import small_grpo_kwargs
from trl import GRPOTrainer
from trl.trainer.utils import pad

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.curation.dynamic import (
    GroupSelector,
    PromptStream,
    ShuffledOrder,
    group_reward_std,
    informative_groups,
)
from trl_rlvr_ext.grpo.methods.dynamic_sampling import DYNAMIC_SAMPLING_STATE_NAME
from trl_rlvr_ext.testing import assert_stock_when_off


# ---------------------------------------------------------------------------------------------- the pure rule
def test_group_reward_std_hand_values():
    nan = math.nan
    rewards = torch.tensor(
        [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.1, 1.0, nan, 0.0, nan, 2.0, nan, nan, nan]
    )
    std = group_reward_std(rewards, 4)
    assert std[0].item() == pytest.approx(math.sqrt(1 / 3))  # unbiased: sum of squares 1, n - 1 = 3
    assert std[1].item() == 0.0 and std[2].item() == 0.0  # equal values are exactly 0, not round-off
    assert std[3].item() == pytest.approx(math.sqrt(0.5))  # NaN left out: [1, 0]
    assert math.isnan(std[4].item())  # one finite value: spread unknown
    assert informative_groups(rewards, 4).tolist() == [True, False, False, True, False]
    assert informative_groups(rewards, 4, min_std=0.6).tolist() == [False, False, False, True, False]


def test_group_reward_std_rejects_ragged_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        group_reward_std(torch.zeros(6), 4)


# Re-typed from volcengine/verl@53971be, recipe/dapo/dapo_ray_trainer.py, `RayDAPOTrainer.fit` (the
# `algorithm.filter_groups` block, DAPO's released code): the metric values grouped by prompt uid, numpy's std of
# each group, a group kept when that std is > 0 or it holds one trajectory.
def verl_kept_uids(uids, metric_values):
    prompt_uid2metric_vals = defaultdict(list)
    for uid, value in zip(uids, metric_values):
        prompt_uid2metric_vals[uid].append(value)
    return [uid for uid, vals in prompt_uid2metric_vals.items() if np.std(vals) > 0 or len(vals) == 1]


@pytest.mark.parametrize("num_generations", [2, 4, 16])
def test_informative_groups_equal_verls_dapo_filter(num_generations):
    g = torch.Generator().manual_seed(num_generations)
    p_correct = torch.tensor([0.0, 1.0, 0.5, 0.9])[torch.randint(0, 4, (64,), generator=g)]
    binary = torch.bernoulli(p_correct.repeat_interleave(num_generations), generator=g).double()
    uids = torch.arange(64).repeat_interleave(num_generations).tolist()
    for rewards in (binary, 0.75 * binary + 0.125):  # correctness, and a shaped reward (exact binary fractions)
        kept = verl_kept_uids(uids, rewards.tolist())
        assert 0 < len(kept) < 64  # both outcomes occur
        assert informative_groups(rewards, num_generations).nonzero().flatten().tolist() == kept


def test_departures_from_verls_dapo_filter():
    # A constant group of 0.1s: numpy's std is 1.4e-17 (round-off) and verl keeps it; ours is exactly 0, dropped
    assert verl_kept_uids([0, 0, 0], [0.1, 0.1, 0.1]) == [0]
    assert informative_groups(torch.tensor([0.1, 0.1, 0.1]), 3).tolist() == [False]
    # An unscorable (NaN) reward: numpy's std is NaN and verl drops the group; ours leaves the NaN out
    assert verl_kept_uids([0] * 4, [1.0, math.nan, 0.0, math.nan]) == []
    assert informative_groups(torch.tensor([1.0, math.nan, 0.0, math.nan]), 4).tolist() == [True]


def test_selector_keeps_each_process_share_in_generation_order():
    sel = GroupSelector(num_processes=2, groups_per_process=2, max_rounds=5)
    sel.record_round(torch.tensor([True, False, False, False]))  # rank 0: g0 kept; rank 1: nothing
    assert not sel.done and sel.deficits() == [1, 2]
    # share 1/4 -> ceil(2 / 0.25) = 8, capped at a full share of 2 groups per process
    assert sel.next_round_groups() == 2
    sel.record_round(torch.tensor([True, True, True, False]))  # rank 0: 1 more (the second dropped); rank 1: 1
    assert sel.kept == [[(0, 0), (1, 0)], [(1, 0)]]
    assert sel.next_round_groups() == 2  # deficit 1, informative share 4/8: ceil(1 / 0.5) = 2
    sel.record_round(torch.tensor([False, False, False, True]))
    assert sel.done and sel.full and not sel.bound_hit
    assert sel.selection(0) == [(0, 0), (1, 0)] and sel.selection(1) == [(1, 0), (2, 1)]
    assert sel.metrics() == {
        "dynamic_sampling/rounds": 3.0,
        "dynamic_sampling/generated_groups": 12.0,
        "dynamic_sampling/kept_frac": 4 / 12,
        "dynamic_sampling/bound_hit": 0.0,
    }
    with pytest.raises(RuntimeError, match="complete"):
        sel.record_round(torch.tensor([True, True]))


def test_selector_at_the_bound_completes_with_the_groups_not_kept():
    sel = GroupSelector(num_processes=2, groups_per_process=3, max_rounds=2)
    sel.record_round(torch.tensor([False, True, False, False, False, False]))
    assert sel.next_round_groups() == 3  # ceil(3 / (1/6)) = 18, capped at 3
    sel.record_round(torch.tensor([False, False, True, False, False, False]))
    assert sel.done and sel.bound_hit and not sel.full
    # rank 0 kept (0,1), (1,2); fills with its first not-kept group (0,0). Rank 1 kept nothing: its first three
    assert sel.selection(0) == [(0, 1), (1, 2), (0, 0)]
    assert sel.selection(1) == [(0, 0), (0, 1), (0, 2)]
    # what the adapter keeps in memory: kept groups plus the first groups_per_process others
    assert sel.candidates(0) == [(0, 1), (1, 2), (0, 0), (0, 2), (1, 0)]
    assert sel.metrics()["dynamic_sampling/bound_hit"] == 1.0
    assert sel.metrics()["dynamic_sampling/kept_frac"] == 2 / 12
    sel.start()
    assert sel.rounds == 0 and not sel.done


def test_selector_with_no_informative_group_generates_full_rounds():
    sel = GroupSelector(num_processes=1, groups_per_process=4, max_rounds=3)
    sel.record_round(torch.zeros(4, dtype=torch.bool))
    assert sel.next_round_groups() == 4
    with pytest.raises(ValueError, match="max_rounds"):
        GroupSelector(1, 1, 0)


def test_prompt_stream_is_identical_per_seed_and_resumes_exactly():
    a, b = PromptStream(ShuffledOrder(5, seed=3)), PromptStream(ShuffledOrder(5, seed=3))
    first = a.draw(3) + a.draw(4)
    assert first == b.draw(7)
    assert sorted(first[:5]) == list(range(5))  # a pass over the data, then the next pass
    state = a.state_dict()
    expected = a.draw(6)
    c = PromptStream(ShuffledOrder(5, seed=99))
    c.load_state_dict(state)
    assert c.draw(6) == expected and c.drawn == a.drawn
    assert PromptStream(ShuffledOrder(4, seed=0, shuffle=False)).draw(6) == [0, 1, 2, 3, 0, 1]
    with pytest.raises(ValueError, match="same data"):
        PromptStream(ShuffledOrder(6, seed=3)).load_state_dict(state)


# ---------------------------------------------------------------------------------------------- the trainer


def data(n=16):
    return Dataset.from_dict({"prompt": [f"{i}+{2 * i}=" for i in range(n)]})


def prompt_index(prompt: str) -> int:
    return int(prompt.split("+")[0])


def half_constant_reward(prompts, completions, **kwargs):
    """Odd prompts: every completion gets 0.5 (a zero-variance group); even prompts: a value that differs between
    distinct completions (the tiny random model never repeats itself in a group), so exactly the even groups carry
    signal."""
    return [
        0.5 if prompt_index(p) % 2 else sum(map(ord, c)) % 997 / 997 + 0.001 * len(c)
        for p, c in zip(prompts, completions)
    ]


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def make_trainer(output_dir, model_path, reward=half_constant_reward, dataset=None, **overrides):
    args = RLVRGRPOConfig(**small_grpo_kwargs(output_dir, **{"dynamic_sampling": True, **overrides}))
    return RLVRGRPOTrainer(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset or data())


def decode_prompts(trainer, batch):
    tok = trainer.processing_class
    return [tok.decode(ids[mask.bool()]) for ids, mask in zip(batch["prompt_ids"], batch["prompt_mask"])]


def spy_batches(trainer):
    """Record every generation batch the optimiser trains on (the merged output of the rounds)."""
    batches = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        batches.append({k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in out.items()})
        return out

    trainer._generate_and_score_completions = spy
    return batches


def test_dynamic_sampling_off_is_stock_grpo_to_the_bit(tiny_model_path, tmp_path):
    """Off (with its other fields set): the same losses, metrics and parameters as stock GRPOTrainer."""

    off = {"dynamic_sampling": False, "dynamic_sampling_max_rounds": 2, "dynamic_sampling_min_std": 0.5}
    runs = assert_stock_when_off(off, model=tiny_model_path, output_dir=tmp_path, checkpoint=False)
    assert not any(k.startswith("dynamic_sampling/") for log in runs.ours.trainer.state.log_history for k in log)


def test_every_optimiser_batch_holds_only_informative_groups(tiny_model_path, tmp_path):
    trainer = make_trainer(tmp_path, tiny_model_path, max_steps=3)
    batches = spy_batches(trainer)
    trainer.train()
    assert len(batches) == 3
    for batch in batches:
        prompts = decode_prompts(trainer, batch)
        assert len(prompts) == 8  # stock batch size: 4 groups of 2
        assert all(prompt_index(p) % 2 == 0 for p in prompts), prompts  # no zero-variance group
        advantages = batch["advantages"].view(-1, 2)
        assert torch.all(advantages.abs().sum(dim=1) > 0)
        mask = batch["completion_mask"]
        assert batch["num_items_in_batch"].item() == mask.sum().item()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    for log in logs:
        assert log["dynamic_sampling/bound_hit"] == 0.0
        assert 2 <= log["dynamic_sampling/rounds"] <= 10  # half of the first round is dropped: at least one more
        # kept_frac = 4 kept / groups generated (surplus informative groups of a round are dropped too)
        assert log["dynamic_sampling/kept_frac"] == 4 / log["dynamic_sampling/generated_groups"]
    # TRL's own metric still describes what was generated: half of the groups had zero spread
    assert all(0 < log["frac_reward_zero_std"] < 1 for log in logs)


def test_round_bound_is_respected_and_the_step_goes_ahead(tiny_model_path, tmp_path):
    trainer = make_trainer(tmp_path, tiny_model_path, reward=constant_reward, dynamic_sampling_max_rounds=3)
    batches = spy_batches(trainer)
    trainer.train()  # every group is zero-variance: it must stop at the bound, not loop
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 3
    for log in logs:
        assert log["dynamic_sampling/rounds"] == 3
        assert log["dynamic_sampling/bound_hit"] == 1.0
        assert log["dynamic_sampling/generated_groups"] == 12  # three full rounds of 4 groups
        assert log["dynamic_sampling/kept_frac"] == 0.0
    for batch in batches:
        assert batch["completion_ids"].size(0) == 8  # completed with zero-variance groups to GRPO's size
        assert torch.all(batch["advantages"] == 0)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo"])
def test_loss_equals_grpo_loss_on_the_kept_groups(tiny_model_path, tmp_path, loss_type, monkeypatch):
    """The adapter's batch against one rebuilt in the test from each round's own output: the informative groups
    (decided here from the recorded rewards), re-padded, with advantages and token count computed here."""
    recorded, rounds = [], []

    def reward(prompts, completions, **kwargs):
        out = half_constant_reward(prompts, completions)
        recorded.append(torch.tensor(out, dtype=torch.float64))
        return out

    original = GRPOTrainer._generate_and_score_completions

    def record_round(self, inputs):
        out = original(self, inputs)
        rounds.append(out)
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", record_round)
    trainer = make_trainer(tmp_path, tiny_model_path, reward, loss_type=loss_type, max_completion_length=8)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = [dict(trainer.train_dataset[r]) for r in (0, 0, 1, 1, 2, 2, 3, 3)]
    merged = trainer._generate_and_score_completions(inputs)
    assert len(rounds) == len(recorded) >= 2

    rows, advantages, need = [], [], 4
    for out, rewards in zip(rounds, recorded, strict=True):
        for g in range(rewards.numel() // 2):
            group = rewards[2 * g : 2 * g + 2]
            if need and group[0] != group[1]:
                need -= 1
                std = group.std()
                advantages.extend(((group - group.mean()) / (std + 1e-4)).tolist())
                for i in (2 * g, 2 * g + 1):
                    prompt = out["prompt_ids"][i][out["prompt_mask"][i].bool()]
                    completion = out["completion_ids"][i][out["completion_mask"][i].bool()]
                    rows.append((prompt, completion))
    assert need == 0
    pad_id = trainer.processing_class.pad_token_id
    expected_batch = {
        "prompt_ids": pad([p for p, _ in rows], padding_value=pad_id, padding_side="left"),
        "prompt_mask": pad([torch.ones_like(p) for p, _ in rows], padding_value=0, padding_side="left"),
        "completion_ids": pad([c for _, c in rows], padding_value=pad_id, padding_side="right"),
        "completion_mask": pad([torch.ones_like(c) for _, c in rows], padding_value=0, padding_side="right"),
        "advantages": torch.tensor(advantages, dtype=torch.float32),
        "num_items_in_batch": torch.tensor(sum(c.numel() for _, c in rows)),
    }
    # Same widths as the adapter's batch: under bf16 autocast a row's log-probs move by ~1e-4 with its amount of left
    # padding (RoPE positions shift), as they do between TRL's own batches; the test is about rows and normalisers.
    extra_left = merged["prompt_ids"].size(1) - expected_batch["prompt_ids"].size(1)
    extra_right = merged["completion_ids"].size(1) - expected_batch["completion_ids"].size(1)
    for key, side, value in [
        ("prompt_ids", (extra_left, 0), pad_id),
        ("prompt_mask", (extra_left, 0), 0),
        ("completion_ids", (0, extra_right), pad_id),
        ("completion_mask", (0, extra_right), 0),
    ]:
        expected_batch[key] = torch.nn.functional.pad(expected_batch[key], side, value=value)
    torch.testing.assert_close(merged["advantages"], expected_batch["advantages"], rtol=1e-5, atol=1e-6)
    assert merged["num_items_in_batch"].item() == expected_batch["num_items_in_batch"].item()
    # On-policy, the loss value is about -mean(A) ~ 0, so compare the gradients too: they carry the normalisers.
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    expected = GRPOTrainer._compute_loss(trainer, trainer.model, expected_batch)
    expected_grads = torch.autograd.grad(expected, params)
    got = trainer.compute_loss(trainer.model, merged)
    got_grads = torch.autograd.grad(got, params)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    got_flat = torch.cat([g.flatten() for g in got_grads])
    expected_flat = torch.cat([e.flatten() for e in expected_grads])
    assert expected_flat.norm() > 0
    # bf16 autocast round-off only (a wrong normaliser or group would be off by a factor or by whole rows)
    assert (got_flat - expected_flat).norm() / expected_flat.norm() < 1e-3


def test_resume_continues_the_same_prompt_stream(tiny_model_path, tmp_path):
    def train(resume=None):
        seen = []

        def reward(prompts, completions, trainer_state, **kwargs):
            seen.append((trainer_state.global_step, tuple(prompts)))
            return half_constant_reward(prompts, completions)

        trainer = make_trainer(
            tmp_path / "run", tiny_model_path, reward, max_steps=4, save_strategy="steps", save_steps=2
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer, seen

    full, full_seen = train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert (checkpoint / DYNAMIC_SAMPLING_STATE_NAME).is_file()
    resumed, resumed_seen = train(resume=str(checkpoint))
    assert resumed_seen == [s for s in full_seen if s[0] >= 2]
    assert len({s[0] for s in resumed_seen}) == 2 and len(resumed_seen) > 2  # extra rounds happened
    assert (
        resumed.method("dynamic_sampling").stream.state_dict() == full.method("dynamic_sampling").stream.state_dict()
    )
    for p, q in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_composes_with_pass_rate_curation_counting_dropped_groups(tiny_model_path, tmp_path):
    generated = []

    def reward(prompts, completions, **kwargs):
        generated.append(len(completions))
        return half_constant_reward(prompts, completions)

    trainer = make_trainer(tmp_path, tiny_model_path, reward, curation="pass_rate", max_steps=2)
    batches = spy_batches(trainer)
    trainer.train()
    state = trainer.method("curation").curation_state
    # every generated completion (kept or dropped) updated the pass-rate counts (decay 1 for an exact count)
    assert trainer.method("dynamic_sampling").stream.source is not trainer.method("curation").training_sampler
    assert sum(generated) > 16  # extra rounds ran
    assert state.seen().sum() > 0
    for batch in batches:
        assert all(prompt_index(p) % 2 == 0 for p in decode_prompts(trainer, batch))


def test_pass_rate_counts_include_dropped_groups(tiny_model_path, tmp_path):
    generated = []

    def reward(prompts, completions, **kwargs):
        generated.extend(prompt_index(p) for p in prompts)
        return half_constant_reward(prompts, completions)

    trainer = make_trainer(
        tmp_path, tiny_model_path, reward, curation="pass_rate", curation_pass_rate_decay=1.0, max_steps=2
    )
    trainer.train()
    trials = trainer.method("curation").curation_state.trials
    for i in range(16):
        assert trials[i] == generated.count(i)
    assert any(generated.count(i) for i in range(1, 16, 2))  # dropped (odd) prompts were counted too


def test_composes_with_self_curation(tiny_model_path, tmp_path):
    trainer = make_trainer(tmp_path, tiny_model_path, curation="self", max_steps=2)
    trainer.method("curation").grade = lambda examples, completion_ids: [False] * len(examples)
    batches = spy_batches(trainer)
    trainer.train()
    for batch in batches:
        assert all(prompt_index(p) % 2 == 0 for p in decode_prompts(trainer, batch))
        assert batch["curation_keep"].all()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"scale_rewards": "batch"}, "scale_rewards='group'"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "sum_then_normalize"),
        ({"dynamic_sampling_max_rounds": 0}, "at least 1"),
        ({"dynamic_sampling_min_std": -0.1}, ">= 0"),
    ],
)
def test_config_rejects_inexact_combinations(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, dynamic_sampling=True, **overrides))


def test_unknown_filter_reward_is_refused(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match="not one of the reward functions"):
        make_trainer(tmp_path, tiny_model_path, dynamic_sampling_reward_func="nope")


def test_filter_on_a_named_correctness_reward(tiny_model_path, tmp_path):
    def correctness(prompts, completions, **kwargs):  # constant on odd prompts, spread on even ones
        return half_constant_reward(prompts, completions)

    def shaping(completions, **kwargs):  # spread everywhere: the total reward alone would keep every group
        return [len(c) / 10 + sum(map(ord, c)) % 13 / 100 for c in completions]

    trainer = make_trainer(
        tmp_path, tiny_model_path, [correctness, shaping], dynamic_sampling_reward_func="correctness", max_steps=2
    )
    batches = spy_batches(trainer)
    trainer.train()
    for batch in batches:
        assert all(prompt_index(p) % 2 == 0 for p in decode_prompts(trainer, batch))


def test_rounds_merge_old_and_reference_log_probs(tiny_model_path, tmp_path, monkeypatch):
    """With num_iterations=2 (old log-probs) and beta > 0 (reference log-probs), the per-token tensors of the rounds
    are merged row for row: each kept row keeps the values its own round computed, padded to the common width."""
    rounds = []
    original = GRPOTrainer._generate_and_score_completions

    def record_round(self, inputs):
        out = original(self, inputs)
        rounds.append(out)
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", record_round)
    trainer = make_trainer(tmp_path, tiny_model_path, num_iterations=2, beta=0.04, max_steps=4)
    batches = spy_batches(trainer)
    trainer.train()
    assert len(batches) == 2 and len(rounds) > 2  # 2 generation batches, each used for 2 iterations
    for batch in batches:
        width = batch["completion_ids"].size(1)
        for key in ("old_per_token_logps", "ref_per_token_logps"):
            assert batch[key].shape == (8, width)
    for batch in batches:  # every merged row carries the log-probs its own round computed for that completion
        for row in range(8):
            n = int(batch["completion_mask"][row].sum())
            completion = batch["completion_ids"][row][:n]
            matches = [
                (out, i)
                for out in rounds
                for i in range(out["completion_ids"].size(0))
                if int(out["completion_mask"][i].sum()) == n and torch.equal(out["completion_ids"][i][:n], completion)
            ]
            keys = ("old_per_token_logps", "ref_per_token_logps")
            assert any(
                all(torch.equal(out[k][i][:n], batch[k][row][:n]) for k in keys)
                and out["advantages"][i] == batch["advantages"][row]
                for out, i in matches
            )
    assert all(math.isfinite(log["loss"]) for log in trainer.state.log_history if "loss" in log)
