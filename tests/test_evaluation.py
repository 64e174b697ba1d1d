"""Pass@k evaluation: generation backend, counting, the end-to-end function, the CLI and the training callback."""

import itertools
import json
import os

import pytest
import torch
from datasets import Dataset

from trl_rlvr_ext.evaluation import PassAtKCallback, evaluate_pass_at_k, pass_at_k
from trl_rlvr_ext.evaluation.evaluator import count_correct
from trl_rlvr_ext.evaluation.generation import TransformersBackend, grade, make_backend, render_prompt_ids
from trl_rlvr_ext.scripts.eval import cli_main


def even_length_reward(completions, **kwargs):
    """A verifiable stand-in for correctness that a random tiny model satisfies about half of the time."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if len(t) % 2 == 0 else 0.0 for t in texts]


def problems(num=6):
    return Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(num)], "answer": [str(2 * i) for i in range(num)]})


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_path), AutoTokenizer.from_pretrained(tiny_model_path)


def test_batched_greedy_equals_one_prompt_at_a_time(tiny):
    model, tokenizer = tiny
    prompts = ["1+1=", "12+345=", "7=", "999+1="]  # different lengths: exercises left padding
    ids = render_prompt_ids(tokenizer, prompts)
    batched = TransformersBackend(model, tokenizer, batch_size=4).generate(ids, greedy=True, max_new_tokens=6)
    single = TransformersBackend(model, tokenizer, batch_size=1).generate(ids, greedy=True, max_new_tokens=6)
    assert batched == single
    assert all(len(per_prompt) == 1 and 1 <= len(per_prompt[0]) <= 6 for per_prompt in batched)


def test_sampling_is_seeded_and_leaves_the_global_rng_alone(tiny):
    model, tokenizer = tiny
    ids = render_prompt_ids(tokenizer, ["1+1=", "2+2="])
    backend = TransformersBackend(model, tokenizer, batch_size=3)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = backend.generate(ids, 4, temperature=1.0, max_new_tokens=5, seed=7)
    assert torch.equal(torch.rand(3), expected_next)  # the caller's RNG stream is untouched
    b = backend.generate(ids, 4, temperature=1.0, max_new_tokens=5, seed=7)
    c = backend.generate(ids, 4, temperature=1.0, max_new_tokens=5, seed=8)
    assert a == b and a != c
    assert [len(x) for x in a] == [4, 4]


class FixedBackend:
    """Returns scripted completions, to test counting without a model."""

    def __init__(self, tokenizer, texts_per_prompt):
        self.tokenizer, self.texts = tokenizer, texts_per_prompt
        self.calls = 0

    def generate(self, prompt_ids, num_samples, **kwargs):
        out = []
        for _ in prompt_ids:
            texts = self.texts[self.calls]
            assert len(texts) == num_samples
            out.append([self.tokenizer(t)["input_ids"] for t in texts])
            self.calls += 1
        return out


def test_count_correct_counts_graded_samples(tiny):
    _, tokenizer = tiny
    rows = [dict(r) for r in problems(3)]
    texts = [["ab", "a", "abcd"], ["a", "b", "c"], ["", "xy", "a"]]  # even lengths: 2, 0, 2 per problem
    counts = count_correct(
        FixedBackend(tokenizer, texts), tokenizer, rows, [even_length_reward], 3, problems_per_batch=2
    )
    assert counts.tolist() == [2, 0, 2]


def test_grade_needs_every_reward_func_and_treats_none_as_wrong():
    def half(completions, **kw):
        return [0.5] * len(completions)

    def none_on_first(completions, **kw):
        return [None] + [1.0] * (len(completions) - 1)

    completions = ["aa", "aa", "a"]
    assert grade([even_length_reward], [""] * 3, completions, [[]] * 3, {}).tolist() == [True, True, False]
    assert grade([even_length_reward, none_on_first], [""] * 3, completions, [[]] * 3, {}).tolist() == [
        False,
        True,
        False,
    ]
    assert grade([half], [""] * 3, completions, [[]] * 3, {}, threshold=0.5).all()
    assert not grade([half], [""] * 3, completions, [[]] * 3, {}).any()


def test_evaluate_pass_at_k_end_to_end(tiny_model_path):
    result = evaluate_pass_at_k(
        tiny_model_path,
        problems(6),
        even_length_reward,
        num_samples=8,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=6,
        batch_size=16,
        progress=False,
    )
    assert list(result.pass_at_k) == [1, 2, 4, 8]
    assert result.num_samples.tolist() == [8] * 6
    assert 0 < result.num_correct.sum() < 48  # a random model is right about half of the time here
    for k, value in result.pass_at_k.items():
        assert value == pytest.approx(pass_at_k(result.num_samples, result.num_correct, k).mean())
    values = list(result.pass_at_k.values())
    assert all(a <= b for a, b in itertools.pairwise(values))
    # the same seed gives the same counts; the result round-trips through JSON
    again = evaluate_pass_at_k(
        tiny_model_path,
        problems(6),
        [even_length_reward],
        num_samples=8,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=6,
        batch_size=16,
        progress=False,
    )
    assert again.num_correct.tolist() == result.num_correct.tolist()
    with pytest.raises(ValueError, match="k > num_samples"):
        evaluate_pass_at_k(tiny_model_path, problems(2), even_length_reward, num_samples=4, ks=[8])


def test_vllm_asked_for_but_missing_is_a_clear_error(tiny):
    try:
        import vllm  # noqa: F401

        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    with pytest.raises(ImportError, match=r"pip install vllm"):
        make_backend("some/model", None, use_vllm=True)


def test_cli_writes_json_and_plot_for_several_models(tiny_model_path, tmp_path):
    from trl_rlvr_ext.toy import save_tiny_model

    other = save_tiny_model(tmp_path / "other", seed=1)
    data = tmp_path / "problems.jsonl"
    problems(4).to_json(str(data))
    out = tmp_path / "eval"
    code = cli_main(
        [
            "--model",
            tiny_model_path,
            other,
            "--labels",
            "seed0",
            "seed1",
            "--dataset",
            str(data),
            "--reward_funcs",
            f"{__name__}.even_length_reward",
            "--num_samples",
            "4",
            "--temperature",
            "1.0",
            "--top_p",
            "1.0",
            "--max_new_tokens",
            "5",
            "--output_dir",
            str(out),
        ]
    )
    assert code == 0
    with open(out / "pass_at_k.json") as f:
        results = json.load(f)["results"]
    assert [r["label"] for r in results] == ["seed0", "seed1"]
    assert list(results[0]["pass_at_k"]) == ["pass@1", "pass@2", "pass@4"]
    assert results[0]["num_samples"] == [4] * 4
    assert os.path.getsize(out / "pass_at_k.png") > 1000
    with open(out / "pass_at_k.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _eval_argv(models, data, out, *extra):
    return [
        "--model", *models, "--dataset", str(data), "--reward_funcs", f"{__name__}.even_length_reward",
        "--num_samples", "2", "--max_new_tokens", "3", "--output_dir", str(out), "--no_plot", *extra,
    ]  # fmt: skip


def test_cli_checks_every_model_before_generating(tiny_model_path, tmp_path, monkeypatch, capsys):
    """A missing model is named at once, before the first model generates anything (no hub lookup)."""
    from trl_rlvr_ext.evaluation import evaluator

    monkeypatch.setattr(evaluator, "evaluate_pass_at_k", lambda *a, **k: pytest.fail("generated before checking"))
    data = tmp_path / "problems.jsonl"
    problems(2).to_json(str(data))
    not_a_model = tmp_path / "empty_dir"
    not_a_model.mkdir()
    cases = {
        "outputs/toy_self/checkpoint-200": "no such directory",  # a path: not a hub id
        "outputs/toy_self": "not in the local cache while HF_HUB_OFFLINE=1",  # could be either: offline, neither
        str(not_a_model): "directory without a saved model",
        "toy:nope": "Unknown toy model",
    }
    for missing, reason in cases.items():
        assert cli_main(_eval_argv([tiny_model_path, missing], data, tmp_path / "out")) == 2
        err = capsys.readouterr().err
        assert missing in err and reason in err and "Traceback" not in err
    assert cli_main(_eval_argv([tiny_model_path], tmp_path / "nope.jsonl", tmp_path / "out")) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "out" / "pass_at_k.json").exists()


def test_cli_keeps_each_finished_result_when_a_later_model_fails(tiny_model_path, tmp_path, monkeypatch, capsys):
    from trl_rlvr_ext.evaluation import evaluator

    real, seen = evaluator.evaluate_pass_at_k, []

    def first_works_then_fails(*args, label, **kwargs):
        seen.append(label)
        if label == "broken":
            # the first model's result is on disk before the second one runs
            with open(tmp_path / "out" / "pass_at_k.json") as f:
                assert [r["label"] for r in json.load(f)["results"]] == ["good"]
            raise RuntimeError("CUDA out of memory")
        return real(*args, label=label, **kwargs)

    monkeypatch.setattr(evaluator, "evaluate_pass_at_k", first_works_then_fails)
    data = tmp_path / "problems.jsonl"
    problems(2).to_json(str(data))
    argv = _eval_argv([tiny_model_path, tiny_model_path, tiny_model_path], data, tmp_path / "out")
    assert cli_main([*argv, "--labels", "good", "broken", "also_good"]) == 1
    assert seen == ["good", "broken", "also_good"]  # one failure does not stop the others
    err = capsys.readouterr().err
    assert "broken: failed: RuntimeError: CUDA out of memory" in err and "1 of 3 models failed" in err
    with open(tmp_path / "out" / "pass_at_k.json") as f:
        assert [r["label"] for r in json.load(f)["results"]] == ["good", "also_good"]


def _grpo_args(tmp_path, **kw):
    from trl import GRPOConfig

    settings = {
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 6,
        "max_steps": 4,
        "learning_rate": 1e-2,
        "logging_steps": 1,
        "report_to": "none",
        "use_cpu": True,
        "save_strategy": "no",
        "gradient_checkpointing": False,
        "seed": 0,
    }
    settings.update(kw)
    return GRPOConfig(**settings)


def test_callback_logs_pass_at_k_and_leaves_training_bit_identical(tiny_model_path, tmp_path):
    from trl import GRPOTrainer

    train = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(8)]})

    def run(with_callback):
        trainer = GRPOTrainer(
            model=tiny_model_path, reward_funcs=even_length_reward, args=_grpo_args(tmp_path), train_dataset=train
        )
        callback = None
        if with_callback:
            callback = PassAtKCallback(
                problems(4), even_length_reward, trainer=trainer, eval_steps=2, num_samples=4, max_new_tokens=5
            )
            trainer.add_callback(callback)
        trainer.train()
        return trainer, callback

    plain, _ = run(False)
    evaluated, callback = run(True)
    for (name, p), (_, q) in zip(plain.model.named_parameters(), evaluated.model.named_parameters()):
        assert torch.equal(p, q), name
    logged = [entry for entry in evaluated.state.log_history if "eval/pass@1" in entry]
    assert [entry["step"] for entry in logged] == [2, 4]
    assert set(logged[0]) >= {"eval/pass@1", "eval/pass@2", "eval/pass@4", "loss"}
    assert [step for step, _ in callback.history] == [2, 4]
    assert logged[0]["eval/pass@4"] == pytest.approx(callback.history[0][1]["eval/pass@4"])
    assert 0.0 <= logged[0]["eval/pass@1"] <= logged[0]["eval/pass@4"] <= 1.0


def test_callback_without_trainer_is_a_clear_error(tiny_model_path, tmp_path):
    from trl import GRPOTrainer

    train = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(8)]})
    callback = PassAtKCallback(problems(2), even_length_reward, eval_steps=1, num_samples=2)
    trainer = GRPOTrainer(
        model=tiny_model_path,
        reward_funcs=even_length_reward,
        args=_grpo_args(tmp_path, max_steps=1),
        train_dataset=train,
        callbacks=[callback],
    )
    with pytest.raises(ValueError, match="no trainer to log into"):
        trainer.train()


def test_callback_arguments_are_checked():
    with pytest.raises(ValueError, match="k > num_samples"):
        PassAtKCallback(problems(2), even_length_reward, num_samples=4, ks=[8])
    with pytest.raises(ValueError, match="eval_steps"):
        PassAtKCallback(problems(2), even_length_reward, eval_steps=0)
