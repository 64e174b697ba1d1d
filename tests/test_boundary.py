"""BoundaryProbeCallback: the metrics against hand-computed values, one process and two."""

import json
import math

import numpy as np
import pytest

from trl_rlvr_ext.evaluation.boundary import BoundaryProbeCallback, boundary_metrics, sequence_logps, spearman


def test_metrics_hand_computed():
    base = [-1.0, -2.0, -3.0, -4.0, -5.0]
    now = [-0.5, -2.0, -4.0, -3.0, -6.0]  # deltas 0.5, 0, -1, 1, -1
    m = boundary_metrics(base, now)
    assert m["boundary/mean_logp_correct"] == pytest.approx(-3.1)
    assert m["boundary/interference_frac"] == pytest.approx(0.4)  # two deltas below -log 2
    # ranks of base 5,4,3,2,1; of delta 4,3,1.5,5,1.5 (tie) -> rho = 3 / sqrt(10 * 9.5)
    assert m["boundary/winner_take_all"] == pytest.approx(3 / math.sqrt(95))
    # one probe per quintile, q1 = the least likely at the start (base -5)
    assert [m[f"boundary/delta_q{q}"] for q in range(1, 6)] == pytest.approx([-1.0, 1.0, -1.0, 0.0, 0.5])
    assert boundary_metrics(base, now, threshold=1.5)["boundary/interference_frac"] == 0.0
    assert boundary_metrics(base, now, threshold=0.9)["boundary/interference_frac"] == pytest.approx(0.4)


def test_quintiles_of_uneven_sizes_and_extreme_correlations():
    base = [6.0, 0.0, 5.0, 1.0, 4.0, 2.0, 3.0]  # sorted order: 0..6 -> groups of sizes 2, 2, 1, 1, 1
    delta = [b + 1 for b in base]
    m = boundary_metrics([-10 + b for b in base], [-10 + b + d for b, d in zip(base, delta)], prefix="p/")
    assert [m[f"p/delta_q{q}"] for q in range(1, 6)] == pytest.approx([1.5, 3.5, 5.0, 6.0, 7.0])
    assert m["p/winner_take_all"] == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2, 3], [0, 0, 0]))
    start = boundary_metrics(base, base)
    assert start["boundary/interference_frac"] == 0.0 and math.isnan(start["boundary/winner_take_all"])
    with pytest.raises(ValueError, match="equal"):
        boundary_metrics([1.0], [1.0, 2.0])


def test_sequence_logps_sums_the_completion_tokens(tiny_model_path):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    prompt, completion = [5, 6, 7], [8, 9]
    logps = torch.log_softmax(model(input_ids=torch.tensor([prompt + completion])).logits[0].float(), dim=-1)
    expected = (logps[2, 8] + logps[3, 9]).item()
    got = sequence_logps(model, 0, [prompt, [1]], [completion, [2, 3, 4]], batch_size=2)  # padded batch
    assert got[0] == pytest.approx(expected, abs=1e-5)


def _trainer(tiny_model_path, tmp_path, **overrides):
    from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset

    from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer

    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path / "run", **{"max_steps": 2, **overrides}))
    return RLVRGRPOTrainer(model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset())


def test_callback_logs_every_n_steps_with_given_probes(tiny_model_path, tmp_path):
    trainer = _trainer(tiny_model_path, tmp_path)
    probes = [{"prompt": f"{i}+{i}=", "completion": str(2 * i)} for i in range(7)]
    callback = BoundaryProbeCallback(probes, trainer=trainer, eval_steps=1)
    trainer.add_callback(callback)
    trainer.train()
    assert [step for step, _ in callback.history] == [0, 1, 2]
    start = callback.history[0][1]
    assert start["boundary/interference_frac"] == 0.0 and start["boundary/delta_q3"] == 0.0
    logged = [log for log in trainer.state.log_history if "boundary/mean_logp_correct" in log]
    assert len(logged) == 2 and logged[-1]["boundary/num_probes"] == 7.0
    assert logged[-1]["boundary/mean_logp_correct"] == pytest.approx(
        callback.history[-1][1]["boundary/mean_logp_correct"]
    )
    # the final measurement is the final model's log-likelihood of the given completions (+ EOS)
    tokenizer = trainer.processing_class
    assert callback.completion_ids[3] == [
        *tokenizer("6", add_special_tokens=False)["input_ids"],
        tokenizer.eos_token_id,
    ]
    again = sequence_logps(trainer.model, tokenizer.pad_token_id, callback.prompt_ids, callback.completion_ids)
    np.testing.assert_allclose(callback.last_logps, again, atol=1e-5)


def test_harvest_and_chat_template(tiny_model_path, tmp_path):
    trainer = _trainer(tiny_model_path, tmp_path, max_steps=1)
    problems = [{"prompt": [{"role": "user", "content": f"{i}+{i}="}], "answer": str(2 * i)} for i in range(5)]

    def anything_nonempty(completions, **kwargs):  # every sample of the random model counts as correct
        return [1.0 if c[0]["content"] is not None else 0.0 for c in completions]

    callback = BoundaryProbeCallback(
        problems=problems, reward_funcs=anything_nonempty, trainer=trainer, eval_steps=1, num_harvest_samples=2
    )
    trainer.add_callback(callback)
    trainer.train()
    tokenizer = trainer.processing_class
    rendered = tokenizer.apply_chat_template(problems[2]["prompt"], add_generation_prompt=True, tokenize=False)
    assert callback.prompt_ids[2] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert "<|im_start|>assistant" in rendered and len(callback.completion_ids) == 5
    assert callback.history[-1][1]["boundary/num_probes"] == 5.0


def test_harvest_with_no_correct_sample_is_a_clear_error(tiny_model_path, tmp_path):
    trainer = _trainer(tiny_model_path, tmp_path, max_steps=1)
    never = lambda completions, **kwargs: [0.0] * len(completions)  # noqa: E731
    trainer.add_callback(
        BoundaryProbeCallback(
            problems=[{"prompt": "1+1="}], reward_funcs=never, trainer=trainer, num_harvest_samples=2
        )
    )
    with pytest.raises(ValueError, match="no correct sample"):
        trainer.train()


def test_bad_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        BoundaryProbeCallback()
    with pytest.raises(ValueError, match="reward_funcs"):
        BoundaryProbeCallback(problems=[{"prompt": "a"}])
    with pytest.raises(ValueError, match="columns"):
        BoundaryProbeCallback([{"prompt": "a"}])


@pytest.mark.distributed
def test_two_processes_shard_gather_and_agree(tiny_model_path, tmp_path):
    from test_distributed import run_torchrun

    run_torchrun("boundary_ddp.py", tiny_model_path, str(tmp_path))
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["history"] == rank1["history"] and len(rank0["history"]) == 4  # steps 0..3
    assert rank0["logged"] == rank1["logged"] and len(rank0["logged"]) == 3
    assert len(rank0["last_logps"]) == 15 and not any(math.isnan(v) for v in rank0["last_logps"])
    # gathered shards == the whole probe set scored by one process
    np.testing.assert_allclose(rank0["last_logps"], rank0["alone"], atol=1e-5)
    assert rank0["last_logps"] != rank0["base_logps"]  # training moved the model: the test is not void
