"""Online curation in RLVRGRPOTrainer: SELF masking and loss, skipped steps, stock equivalence, checkpoints."""

import json
import os

import pytest
import torch
from datasets import Dataset
from grpo_helpers import small_grpo_kwargs
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import split_tensor_dict

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.evaluation.generation import TransformersBackend, decode_completions, render_prompt_ids
from trl_rlvr_ext.grpo.methods.curation import CURATION_STATE_NAME
from trl_rlvr_ext.sampling import SamplingSettings
from trl_rlvr_ext.testing import assert_stock_when_off


def length_reward(completions, curation_row=None, **kwargs):
    """Dense and prompt-dependent (the row id shifts each group's mean), so group and batch statistics differ."""
    rows = curation_row if curation_row is not None else [0] * len(completions)
    return [row + sum(map(ord, c)) % 7 / 10 for c, row in zip(completions, rows)]


def prompts(n=8):
    return Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(n)], "answer": [str(2 * i) for i in range(n)]})


def make_trainer(tmp_path, model_path, reward=length_reward, dataset=None, **overrides):
    args = RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, **overrides))
    return RLVRGRPOTrainer(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset or prompts())


def scripted_greedy(trainer, solved_rows):
    """Replace the greedy answers' grading by a script: row r is solved iff r in solved_rows(step)."""
    trainer.method("curation").grade = lambda examples, completion_ids: [
        ex["curation_row"] in solved_rows(trainer.state.global_step) for ex in examples
    ]


# ---------------------------------------------------------------------------------------------- the SELF loss
def independent_advantages(rewards, keep, num_generations, scale):
    """GRPO advantages computed from the kept prompts' rewards only (TRL's formula, written out)."""
    kept = rewards[keep].view(-1, num_generations)
    mean = kept.mean(dim=1, keepdim=True)
    std = kept.std(dim=1, keepdim=True) if scale == "group" else kept.flatten().std().expand_as(mean)
    return ((kept - mean) / (std + 1e-4)).flatten()


@pytest.mark.parametrize(
    "loss_type, scale",
    [("dapo", "batch"), ("dapo", "group"), ("grpo", "batch"), ("sapo", "group"), ("dr_grpo", "batch")],
)
def test_self_loss_equals_grpo_loss_on_the_kept_prompts(tiny_model_path, tmp_path, loss_type, scale):
    recorded = []

    def reward(completions, **kwargs):
        out = length_reward(completions, **kwargs)
        recorded.append(torch.tensor(out))
        return out

    trainer = make_trainer(
        tmp_path, tiny_model_path, reward, curation="self", loss_type=loss_type, scale_rewards=scale
    )
    scripted_greedy(trainer, lambda step: {1, 3})
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = [dict(trainer.train_dataset[r]) for r in (0, 0, 1, 1, 2, 2, 3, 3)]
    out = trainer._generate_and_score_completions(inputs)
    rewards = recorded[-1]
    keep = torch.tensor([True, True, False, False, True, True, False, False])
    assert torch.equal(out["curation_keep"], keep)
    advantages = independent_advantages(rewards, keep, 2, scale)
    torch.testing.assert_close(out["advantages"][keep], advantages, rtol=1e-5, atol=1e-6)
    assert torch.all(out["advantages"][~keep] == 0)
    if scale == "batch":  # the kept prompts' own batch statistics, not the whole batch's: the masking matters
        stock = (rewards.view(-1, 2) - rewards.view(-1, 2).mean(1, keepdim=True)).flatten() / (rewards.std() + 1e-4)
        assert not torch.allclose(stock[keep], advantages)
    # stock GRPO's loss on a batch made of the kept prompts only, with its own token normaliser
    kept_batch = {k: out[k][keep] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
    kept_batch["advantages"] = advantages
    kept_batch["num_items_in_batch"] = out["completion_mask"][keep].sum()
    expected = GRPOTrainer._compute_loss(trainer, trainer.model, kept_batch)
    trainer.method("curation").count_window_rows([out])  # what _prepare_inputs does for the sequence-averaged losses
    got = trainer.compute_loss(trainer.model, out)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-7)
    assert got.abs() > 0


def test_self_loss_over_micro_batches_sums_to_the_kept_only_loss(tiny_model_path, tmp_path):
    # dapo's normaliser spans the generation batch: the micro-batch losses of one optimizer step add up to GRPO's
    # loss on the kept prompts, however the kept rows fall into micro-batches (one of them may hold none)
    trainer = make_trainer(
        tmp_path, tiny_model_path, curation="self", per_device_train_batch_size=4, gradient_accumulation_steps=2
    )
    scripted_greedy(trainer, lambda step: {0, 1, 3})
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    inputs = [dict(trainer.train_dataset[r]) for r in (0, 0, 1, 1, 2, 2, 3, 3)]
    out = trainer._generate_and_score_completions(inputs)
    keep = out["curation_keep"]
    assert keep.tolist() == [False] * 4 + [True] * 2 + [False] * 2
    micro = split_tensor_dict(dict(out), 2)  # unshuffled: the first micro-batch keeps nothing
    losses = [trainer.compute_loss(trainer.model, m) for m in micro]
    assert losses[0] == 0 and losses[0].requires_grad  # still a graph, for DDP's all-reduce
    kept_batch = {k: out[k][keep] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
    kept_batch["advantages"] = out["advantages"][keep]
    kept_batch["num_items_in_batch"] = out["completion_mask"][keep].sum()
    expected = GRPOTrainer._compute_loss(trainer, trainer.model, kept_batch)
    torch.testing.assert_close(losses[0] + losses[1], expected, rtol=1e-5, atol=1e-7)
    # the empty micro-batch's gradient is exactly zero
    trainer.model.zero_grad()
    losses = [trainer.compute_loss(trainer.model, m) for m in micro]
    losses[0].backward()
    assert all(p.grad is None or torch.all(p.grad == 0) for p in trainer.model.parameters())


def test_greedy_rows_processor_forces_the_argmax_only_where_asked():
    from trl_rlvr_ext.curation.greedy import GreedyRows

    scores = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 1.0], [0.0, 0.5, 0.4]])
    out = GreedyRows(torch.tensor([False, True, True]))(None, scores.clone())
    assert torch.equal(out[0], scores[0])
    assert out[1].tolist() == [0.0, float("-inf"), float("-inf")]
    assert out[2].tolist() == [float("-inf"), 0.0, float("-inf")]


def test_fused_greedy_rows_equal_a_separate_greedy_decode(tiny_model_path, tmp_path):
    graded = []
    trainer = make_trainer(tmp_path, tiny_model_path, curation="self", per_device_train_batch_size=8)
    real = trainer.method("curation").grade

    def spy(examples, completion_ids):
        graded.append(([e["curation_row"] for e in examples], [list(c) for c in completion_ids]))
        return real(examples, completion_ids)

    trainer.method("curation").grade = spy
    trainer.model.train()
    inputs = [dict(trainer.train_dataset[r]) for r in (5, 5, 2, 2, 7, 7, 0, 0)]
    out = trainer._generate_and_score_completions(inputs)
    assert out["completion_ids"].size(0) == 8  # the greedy rows were split off again
    rows, fused = graded[-1]
    assert rows == [5, 2, 7, 0]
    tokenizer = trainer.processing_class
    backend = TransformersBackend(trainer.model, tokenizer, batch_size=8)
    prompts = render_prompt_ids(tokenizer, [trainer.train_dataset[r]["prompt"] for r in rows])
    separate = [x[0] for x in backend.generate(prompts, SamplingSettings(greedy=True, max_new_tokens=6))]
    assert fused == separate


def test_greedy_pass_decodes_greedily_with_the_current_policy(tiny_model_path, tmp_path):
    seen = []

    def reward(completions, **kwargs):
        seen.append(list(completions))
        return [1.0 if len(c) % 2 == 0 else 0.0 for c in completions]

    trainer = make_trainer(tmp_path, tiny_model_path, reward, curation="self")
    examples = [dict(trainer.train_dataset[r]) for r in range(5)]
    correct = trainer.method("curation").greedy_grade(examples)
    tokenizer = trainer.processing_class
    backend = TransformersBackend(trainer.model, tokenizer, batch_size=1)
    ids = backend.generate(
        render_prompt_ids(tokenizer, [e["prompt"] for e in examples]), SamplingSettings(greedy=True, max_new_tokens=6)
    )
    expected = decode_completions(tokenizer, [x[0] for x in ids], False)
    assert seen[-1] == expected
    assert correct == [len(c) % 2 == 0 for c in expected]


# ---------------------------------------------------------------------------------------------- skipped steps
class ParamRecorder(TrainerCallback):
    def __init__(self):
        self.params = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.params.append([p.detach().clone() for p in model.parameters()])


def test_step_without_kept_prompts_leaves_parameters_untouched(tiny_model_path, tmp_path):
    # AdamW with weight decay and momentum from step 1 would move every parameter at step 2 even with zero gradients
    trainer = make_trainer(tmp_path, tiny_model_path, curation="self", weight_decay=0.1, max_steps=3)
    scripted_greedy(trainer, lambda step: set(range(8)) if step == 1 else set())
    recorder = ParamRecorder()
    trainer.add_callback(recorder)
    initial = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    step1, step2, step3 = recorder.params
    assert any(not torch.equal(a, b) for a, b in zip(initial, step1))
    assert all(torch.equal(a, b) for a, b in zip(step1, step2))  # the skipped step
    assert any(not torch.equal(a, b) for a, b in zip(step2, step3))
    logs = {log["step"]: log for log in trainer.state.log_history if "loss" in log}
    assert [logs[s]["curation/step_skipped"] for s in (1, 2, 3)] == [0.0, 1.0, 0.0]
    assert [logs[s]["curation/skipped_steps"] for s in (1, 2, 3)] == [0.0, 1.0, 1.0]
    assert logs[2]["curation/kept_prompts"] == 0 and logs[1]["curation/kept_prompts"] == 4
    assert logs[2]["curation/greedy_solved_frac"] == 1.0 and logs[2]["loss"] == 0.0
    # the optimizer never counted the skipped step
    state = trainer.optimizer.state[next(trainer.model.parameters())]
    assert int(state["step"]) == 2


class StateRecorder(TrainerCallback):
    """Parameters and every optimizer-state tensor at the end of each optimizer step."""

    def __init__(self, trainer):
        self.trainer, self.params, self.states = trainer, [], []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.params.append([p.detach().clone() for p in model.parameters()])
        optimizer_state = self.trainer.optimizer.state_dict()["state"]
        self.states.append(
            {(i, k): torch.as_tensor(v).clone() for i, st in optimizer_state.items() for k, v in st.items()}
        )


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])  # token-normalised, and rescaled per window
def test_empty_optimizer_window_inside_a_generation_batch_is_not_stepped(
    tiny_model_path, tmp_path, monkeypatch, loss_type
):
    """steps_per_generation = 2 x gradient_accumulation_steps: each generation batch feeds two optimizer steps. At
    the second generation (global step 2) the first prompt is solved greedily; unshuffled, its rows make up the whole
    window of step 3, while step 4 trains on the other prompt. Step 3 must leave the parameters AND the optimizer state
    (AdamW moments, step count) bit-identical, although momentum from steps 1-2 and weight decay would move them."""
    import trl.trainer.grpo_trainer as grpo_module

    monkeypatch.setattr(grpo_module, "shuffle_sequence_dict", lambda batch: batch)
    trainer = make_trainer(
        tmp_path,
        tiny_model_path,
        curation="self",
        loss_type=loss_type,
        per_device_train_batch_size=2,
        steps_per_generation=2,
        weight_decay=0.1,
        max_steps=4,
    )
    solved_first = []

    def grade(examples, completion_ids):
        solved = [i == 0 and trainer.state.global_step == 2 for i in range(len(examples))]
        solved_first.append(solved)
        return solved

    trainer.method("curation").grade = grade
    recorder = StateRecorder(trainer)
    trainer.add_callback(recorder)
    trainer.train()
    assert [len(s) for s in solved_first] == [2, 2] and solved_first[1] == [True, False]
    step1, step2, step3, step4 = recorder.params
    assert any(not torch.equal(a, b) for a, b in zip(step1, step2))
    assert all(torch.equal(a, b) for a, b in zip(step2, step3))  # the empty window: parameters untouched
    assert any(not torch.equal(a, b) for a, b in zip(step3, step4))
    state2, state3, state4 = recorder.states[1:]
    assert state2.keys() == state3.keys() and all(torch.equal(state2[k], state3[k]) for k in state2)
    assert any(not torch.equal(state3[k], state4[k]) for k in state3)
    assert {int(v) for (_, name), v in state4.items() if name == "step"} == {3}  # AdamW never counted step 3
    logs = {log["step"]: log for log in trainer.state.log_history if "loss" in log}
    assert [logs[s]["curation/step_skipped"] for s in (1, 2, 3, 4)] == [0.0, 0.0, 1.0, 0.0]
    assert trainer.state.global_step == 4  # the skipped step still counts as a step (and advances the LR schedule)


@pytest.mark.parametrize(
    "loss_type, extra",
    [("grpo", {}), ("sapo", {}), ("dr_grpo", {}), ("luspo", {"importance_sampling_level": "sequence"})],
)
def test_self_sequence_averaged_losses_weigh_each_kept_sequence_one_over_k(
    tiny_model_path, tmp_path, monkeypatch, loss_type, extra
):
    """Two micro-batches of one optimizer window keep 2 and 4 rows. Their losses, as the trainer computes them, must
    add up to GRPO's loss on the 6 kept rows as one batch (TRL's formula, computed independently on that batch), and
    so must their gradients: each kept sequence weighs 1/6, not 1/(2·2) in one micro-batch and 1/(2·4) in the other.
    (At ratio 1 the loss is about 0, since advantages sum to 0 per group: the gradients carry the test.)"""
    import trl.trainer.grpo_trainer as grpo_module

    monkeypatch.setattr(grpo_module, "shuffle_sequence_dict", lambda batch: batch)
    trainer = make_trainer(
        tmp_path,
        tiny_model_path,
        curation="self",
        loss_type=loss_type,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        **extra,
    )
    scripted_greedy(trainer, lambda step: {1})
    trainer.model.double()  # float64: the two computations batch rows differently, and float32 noise would dominate
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    inputs = [dict(trainer.train_dataset[r]) for r in (0, 0, 1, 1, 2, 2, 3, 3)]
    trainer._step, trainer._buffered_inputs = 0, None
    micro = [trainer._prepare_inputs(inputs)]
    trainer._step = 1
    micro.append(trainer._prepare_inputs(inputs))
    assert [m["curation_keep"].tolist() for m in micro] == [[True, True, False, False], [True] * 4]
    losses = [trainer.compute_loss(trainer.model, m) for m in micro]

    full = {k: torch.cat([m[k] for m in micro]) for k in ("prompt_ids", "prompt_mask", "completion_ids")}
    full["completion_mask"] = torch.cat([m["completion_mask"] for m in micro])
    full["advantages"] = torch.cat([m["advantages"] for m in micro])
    keep = torch.cat([m["curation_keep"] for m in micro])
    kept_batch = {k: v[keep] for k, v in full.items()}
    kept_batch["num_items_in_batch"] = kept_batch["completion_mask"].sum()
    trainer.current_gradient_accumulation_steps = 1  # one batch of the 6 kept rows
    expected = GRPOTrainer._compute_loss(trainer, trainer.model, kept_batch)
    torch.testing.assert_close(losses[0] + losses[1], expected, rtol=1e-5, atol=1e-7)  # about 0: see above
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    got = torch.autograd.grad(losses[0] + losses[1], params)
    want = torch.autograd.grad(expected, params)
    scale = max(g.abs().max() for g in want)
    assert scale > 1e-3
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6 * scale)


def test_self_refuses_loss_types_without_a_kept_only_normaliser(tmp_path):
    with pytest.raises(ValueError, match=r"loss_type='bnpo'.*Use one of \['dapo', 'cispo', 'vespo', 'grpo'"):
        RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="self", loss_type="bnpo"))
    RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="pass_rate", loss_type="bnpo"))  # only SELF masks rows
    with pytest.raises(ValueError, match="must be a multiple of gradient_accumulation_steps"):
        RLVRGRPOConfig(
            **small_grpo_kwargs(
                tmp_path, curation="self", loss_type="grpo", gradient_accumulation_steps=2, steps_per_generation=3
            )
        )
    RLVRGRPOConfig(
        **small_grpo_kwargs(tmp_path, curation="self", gradient_accumulation_steps=2, steps_per_generation=3)
    )  # dapo
    # the window factor multiplies TRL's whole micro-batch loss: no other term may ride along
    with pytest.raises(ValueError, match="entropy bonus"):
        RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="self", loss_type="grpo", entropy_coef=0.01))
    RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="self", entropy_coef=0.01))  # dapo: no factor


def test_self_sequence_averaged_loss_refuses_a_router_aux_loss(tiny_model_path, tmp_path):
    trainer = make_trainer(tmp_path, tiny_model_path, curation="self", loss_type="grpo")
    trainer.aux_loss_enabled = True  # what GRPOTrainer sets for a MoE model with router_aux_loss_coef != 0
    with pytest.raises(ValueError, match="router auxiliary loss"):
        trainer.method("curation").check_loss_terms()


def test_self_default_is_the_papers_filter(tiny_model_path, tmp_path):
    """By default SELF draws every batch uniformly and lets it shrink: prompts found solved are drawn again."""
    trainer = make_trainer(tmp_path, tiny_model_path, curation="self", per_device_train_batch_size=4)
    assert trainer.args.curation_self_recheck_steps == 0
    state = trainer.method("curation").curation_state
    state.update_greedy(list(range(8)), [True] * 8, step=0)  # every prompt solved just now
    sampler = trainer._get_train_sampler()
    drawn = [sampler.draw_chunk() for _ in range(4)]
    assert sorted(i for chunk in drawn for i in chunk) == list(range(8))  # one uniform pass, nothing skipped


# ---------------------------------------------------------------------------------------------- equivalences
def run(trainer_cls, args_cls, tmp_path, model_path, reward, dataset, **overrides):
    trainer = trainer_cls(
        model=model_path,
        reward_funcs=reward,
        args=args_cls(**small_grpo_kwargs(tmp_path, **overrides)),
        train_dataset=dataset,
    )
    trainer.train()
    return trainer


def test_curation_off_is_stock_grpo_to_the_bit(tiny_model_path, tmp_path):
    small = small_grpo_kwargs(tmp_path, num_iterations=2)
    del small["output_dir"]
    assert_stock_when_off(
        {"curation": "none"},
        training_args=small,
        reward_funcs=length_reward,
        train_dataset=prompts(),
        model=tiny_model_path,
        output_dir=tmp_path,
        checkpoint=False,
        require_clipping=False,  # as before: curation acts on which prompts are drawn, clipped or not
    )


def test_self_with_no_greedily_solved_prompt_is_grpo_to_the_bit(tiny_model_path, tmp_path):
    # the toy task with its verifiable reward: the random tiny model never answers correctly, so SELF keeps every
    # prompt, and must then train exactly as stock GRPO (same prompts, advantages, normalisers, updates)
    from trl_rlvr_ext.rewards.toy import toy_accuracy_reward
    from trl_rlvr_ext.toy.task import make_task_datasets

    def reward(completions, answer, **kwargs):  # toy correctness plus a dense term, so the loss is not zero
        return [a + sum(map(ord, c)) % 7 / 10 for a, c in zip(toy_accuracy_reward(completions, answer), completions)]

    data = make_task_datasets(num_train=16, num_test=4, min_digits=1, max_digits=2)["train"]
    stock = run(GRPOTrainer, GRPOConfig, tmp_path / "a", tiny_model_path, reward, data)
    ours = run(
        RLVRGRPOTrainer,
        RLVRGRPOConfig,
        tmp_path / "b",
        tiny_model_path,
        reward,
        data,
        curation="self",
        curation_correct_threshold=1.0,
        curation_id_column="idx",
        curation_self_fused_greedy=False,  # a separate greedy call leaves the sampling draws untouched
    )
    logs = [log for log in ours.state.log_history if "loss" in log]
    assert all(log["curation/greedy_solved_frac"] == 0.0 and log["curation/kept_prompts"] == 4 for log in logs)
    for p, q in zip(stock.model.parameters(), ours.model.parameters()):
        assert torch.equal(p, q)
    assert [log["loss"] for log in stock.state.log_history if "loss" in log] == [log["loss"] for log in logs]


# ---------------------------------------------------------------------------------------------- training
def test_pass_rate_curation_trains_and_tracks_pass_rates(tiny_model_path, tmp_path):
    from trl_rlvr_ext.toy.task import make_task_datasets

    def half_right(completions, idx, **kwargs):  # verifiable correctness that depends on the problem
        return [float((i + sum(map(ord, c))) % 2 == 0) for i, c in zip(idx, completions)]

    data = make_task_datasets(num_train=12, num_test=4, min_digits=1, max_digits=2)["train"]
    trainer = make_trainer(
        tmp_path,
        tiny_model_path,
        half_right,
        data,
        curation="pass_rate",
        curation_id_column="idx",
        max_steps=4,
        curation_pass_rate_target="mid",
        curation_pass_rate_floor=0.2,
        curation_pass_rate_decay=1.0,
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert all("curation/mean_pass_rate" in log and "curation/batch_pass_rate" in log for log in logs)
    state, sampler = trainer.method("curation").curation_state, trainer.method("curation").training_sampler
    assert state.trials.sum() == 4 * 8  # 4 generation batches of 8 completions
    probabilities = sampler.probabilities()
    assert probabilities.min() > 0 and probabilities.max() > probabilities.min()  # the estimates moved the weights


def test_self_curation_on_the_toy_task_skips_solved_prompts(tiny_model_path, tmp_path):
    from trl_rlvr_ext.toy.task import make_task_datasets

    def reward(completions, idx, **kwargs):  # greedy completions are fixed per prompt: "correct" for even idx here
        return [float(i % 2 == 0) for i in idx]

    data = make_task_datasets(num_train=16, num_test=4, min_digits=1, max_digits=2)["train"]
    trainer = make_trainer(
        tmp_path,
        tiny_model_path,
        reward,
        data,
        curation="self",
        curation_id_column="idx",
        max_steps=4,
        curation_self_prepass=True,
        curation_self_recheck_steps=100,
    )
    drawn = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        drawn.append({x["idx"] for x in inputs})
        return original(inputs)

    trainer._generate_and_score_completions = spy
    trainer.train()
    # the pre-pass marked every even problem solved, so the sampler only ever draws odd ones
    assert trainer.method("curation").curation_state.prepass_done
    assert all(all(i % 2 == 1 for i in batch) for batch in drawn)
    assert all(log["curation/kept_prompts"] == 4 for log in trainer.state.log_history if "loss" in log)


# ---------------------------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("mode", ["self", "pass_rate"])
def test_resume_continues_the_same_index_stream(tiny_model_path, tmp_path, mode):
    def reward(completions, curation_row, **kwargs):
        return [float((row + sum(map(ord, c))) % 3 == 0) for row, c in zip(curation_row, completions)]

    def train(output_dir, resume=None):
        trainer = make_trainer(
            output_dir,
            tiny_model_path,
            reward,
            prompts(8),
            curation=mode,
            max_steps=6,
            save_strategy="steps",
            save_steps=2,
            per_device_train_batch_size=4,
            curation_self_recheck_steps=2,
        )
        streams = []
        original = trainer._generate_and_score_completions

        def spy(inputs):
            streams.append((trainer.state.global_step, [x["curation_row"] for x in inputs]))
            return original(inputs)

        trainer._generate_and_score_completions = spy
        trainer.train(resume_from_checkpoint=resume)
        return trainer, streams

    full, full_stream = train(tmp_path / "full")
    # 8 prompts, 2 per generation batch: 4 steps per pass; checkpoint 2 is inside pass 0, checkpoint 4 at its end
    for checkpoint in (2, 4):
        path = tmp_path / "full" / f"checkpoint-{checkpoint}"
        assert (path / CURATION_STATE_NAME).is_file()
        with open(path / CURATION_STATE_NAME) as f:
            assert json.load(f)["state"]["num_prompts"] == 8
        resumed, stream = train(tmp_path / "full", resume=str(path))
        assert stream == full_stream[checkpoint:]
        assert resumed.method("curation").curation_state == full.method("curation").curation_state
    assert len({tuple(rows) for _, rows in full_stream}) > 1


def test_resume_rejects_a_checkpoint_without_curation_state(tiny_model_path, tmp_path):
    plain = make_trainer(tmp_path, tiny_model_path, max_steps=1, save_strategy="steps", save_steps=1)
    plain.train()
    trainer = make_trainer(tmp_path, tiny_model_path, curation="pass_rate", max_steps=2)
    with pytest.raises(FileNotFoundError, match=CURATION_STATE_NAME):
        trainer.train(resume_from_checkpoint=os.path.join(tmp_path, "checkpoint-1"))


def test_configuration_errors_are_clear(tiny_model_path, tmp_path):
    def other(completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match="curation_reward_func"):
        RLVRGRPOTrainer(
            model=tiny_model_path,
            reward_funcs=[length_reward, other],
            args=RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="self")),
            train_dataset=prompts(),
        )
    with pytest.raises(ValueError, match="not one of the reward functions"):
        make_trainer(tmp_path, tiny_model_path, curation="self", curation_reward_func="nope")
    with pytest.raises(ValueError, match="not a column"):
        make_trainer(tmp_path, tiny_model_path, curation="self", curation_id_column="idx")
    dup = Dataset.from_dict({"prompt": ["a", "b", "c", "d"], "idx": [0, 1, 1, 2]})
    with pytest.raises(ValueError, match="duplicates"):
        make_trainer(tmp_path, tiny_model_path, dataset=dup, curation="self", curation_id_column="idx")
    with pytest.raises(ValueError, match="remove_unused_columns"):
        RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="self", remove_unused_columns=True))
    with pytest.raises(ValueError, match="curation_pass_rate_floor"):
        RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="pass_rate", curation_pass_rate_floor=0.0))
    with pytest.raises(ValueError, match="not supported"):
        RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="greedy"))


@pytest.mark.parametrize("loss_type", ["dapo", "cispo"])
def test_padding_rows_carry_no_loss(tiny_model_path, tmp_path, loss_type):
    # multi-process runs pad each rank's kept rows to a common count; for token-normalised losses that changes nothing
    from trl_rlvr_ext.curation.controller import select_rows

    trainer = make_trainer(tmp_path, tiny_model_path, curation="self", loss_type=loss_type)
    scripted_greedy(trainer, lambda step: {1, 3})
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    out = trainer._generate_and_score_completions([dict(trainer.train_dataset[r]) for r in (0, 0, 1, 1, 2, 2, 3, 3)])
    index = out.pop("curation_keep").nonzero(as_tuple=True)[0]
    padded = select_rows(out, index, num_padding=3)
    assert padded["completion_mask"].size(0) == 7 and padded["completion_mask"][-3:].sum() == 0
    assert torch.all(padded["advantages"][-3:] == 0)
    plain = GRPOTrainer._compute_loss(trainer, trainer.model, select_rows(out, index))
    torch.testing.assert_close(GRPOTrainer._compute_loss(trainer, trainer.model, padded), plain)
