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
from trl_rlvr_ext.sampling import SamplingSettings
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
    greedy = SamplingSettings(greedy=True, max_new_tokens=6)
    batched = TransformersBackend(model, tokenizer, batch_size=4).generate(ids, greedy)
    single = TransformersBackend(model, tokenizer, batch_size=1).generate(ids, greedy)
    assert batched == single
    assert all(len(per_prompt) == 1 and 1 <= len(per_prompt[0]) <= 6 for per_prompt in batched)


def test_sampling_is_seeded_and_leaves_the_global_rng_alone(tiny):
    model, tokenizer = tiny
    ids = render_prompt_ids(tokenizer, ["1+1=", "2+2="])
    backend = TransformersBackend(model, tokenizer, batch_size=3)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = backend.generate(ids, SamplingSettings(4, temperature=1.0, max_new_tokens=5, seed=7))
    assert torch.equal(torch.rand(3), expected_next)  # the caller's RNG stream is untouched
    b = backend.generate(ids, SamplingSettings(4, temperature=1.0, max_new_tokens=5, seed=7))
    c = backend.generate(ids, SamplingSettings(4, temperature=1.0, max_new_tokens=5, seed=8))
    assert a == b and a != c
    assert [len(x) for x in a] == [4, 4]


class FixedBackend:
    """Returns scripted completions, to test counting without a model."""

    def __init__(self, tokenizer, texts_per_prompt):
        self.tokenizer, self.texts = tokenizer, texts_per_prompt
        self.calls = 0

    def generate(self, prompt_ids, sampling):
        num_samples = sampling.num_samples
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
        FixedBackend(tokenizer, texts),
        tokenizer,
        rows,
        [even_length_reward],
        SamplingSettings(3),
        problems_per_batch=2,
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
        sampling=SamplingSettings(num_samples=8, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=0),
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
        sampling=SamplingSettings(num_samples=8, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=0),
        batch_size=16,
        progress=False,
    )
    assert again.num_correct.tolist() == result.num_correct.tolist()
    with pytest.raises(ValueError, match="k > num_samples"):
        evaluate_pass_at_k(
            tiny_model_path, problems(2), even_length_reward, sampling=SamplingSettings(num_samples=4), ks=[8]
        )


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


def test_cli_reports_pass_hat_k_and_intervals_and_plots_the_chosen_metric(tiny_model_path, tmp_path, capsys):
    data = tmp_path / "problems.jsonl"
    problems(4).to_json(str(data))
    out = tmp_path / "eval"
    argv = _eval_argv([tiny_model_path], data, out, "--bootstrap_resamples", "50", "--confidence_level", "0.9")
    argv.remove("--no_plot")
    assert cli_main([*argv, "--plot_metric", "pass^"]) == 0
    with open(out / "pass_at_k.json") as f:
        (result,) = json.load(f)["results"]
    assert list(result["pass_hat_k"]) == ["pass^1", "pass^2"] and "pass^2" in capsys.readouterr().out
    assert result["intervals"] and os.path.getsize(out / "pass_at_k.png") > 1000
    assert cli_main(_eval_argv([tiny_model_path], data, tmp_path / "no_ci", "--confidence_level", "0")) == 0
    with open(tmp_path / "no_ci" / "pass_at_k.json") as f:
        assert not json.load(f)["results"][0].get("intervals")
    assert cli_main(_eval_argv([tiny_model_path], data, out, "--confidence_level", "1.5")) == 2
    assert "--confidence_level must be in (0, 1)" in capsys.readouterr().err


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
    # pass^k and the bootstrap intervals are logged beside pass@k; maj@k needs an answer extractor (none here)
    assert set(logged[0]) >= {"eval/pass^1", "eval/pass^4", "eval/pass@4_ci_low", "eval/pass@4_ci_high"}
    assert not any(key.startswith("eval/maj@") for key in logged[0])
    assert logged[0]["eval/pass^1"] == pytest.approx(logged[0]["eval/pass@1"])
    assert logged[0]["eval/pass^4"] <= logged[0]["eval/pass@1"]
    assert logged[0]["eval/pass@4_ci_low"] <= logged[0]["eval/pass@4"] <= logged[0]["eval/pass@4_ci_high"]


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
    with pytest.raises(ValueError, match="confidence_level"):
        PassAtKCallback(problems(2), even_length_reward, confidence_level=95)
    with pytest.raises(ValueError, match="Unknown answer_extractor"):
        PassAtKCallback(problems(2), even_length_reward, answer_extractor="boxed")
    with pytest.raises(ValueError, match="k > num_samples"):
        PassAtKCallback(problems(2), even_length_reward, num_samples=4, ks=[8])
    with pytest.raises(ValueError, match="eval_steps"):
        PassAtKCallback(problems(2), even_length_reward, eval_steps=0)


# --- pass^k, maj@k and intervals through the evaluator, the JSON, the plot and the callback --------------------------


def length_class(text):
    """A stand-in extracted answer: the length modulo 3; an empty completion gives no answer."""
    return None if not text else str(len(text) % 3)


def test_answer_extractors_and_their_resolution():
    from trl.rewards import accuracy_reward

    from trl_rlvr_ext.evaluation.answers import extract_answers, math_answer, resolve_answer_extractor, toy_answer
    from trl_rlvr_ext.rewards.math import math_accuracy_reward
    from trl_rlvr_ext.rewards.toy import toy_accuracy_reward

    assert toy_answer(" [231] ") == "231" and toy_answer("231") is None
    assert extract_answers(toy_answer, ["[7]", [{"role": "assistant", "content": "[8]"}], "7"]) == ["7", "8", None]
    assert resolve_answer_extractor("auto", [even_length_reward, toy_accuracy_reward]) is toy_answer
    assert resolve_answer_extractor("auto", [math_accuracy_reward]) is math_answer
    assert resolve_answer_extractor("auto", [accuracy_reward]) is math_answer
    assert resolve_answer_extractor("auto", [even_length_reward]) is None  # no known extractor: no maj@k
    assert resolve_answer_extractor(None, [toy_accuracy_reward]) is None
    assert resolve_answer_extractor("toy") is toy_answer and resolve_answer_extractor(length_class) is length_class
    with pytest.raises(ValueError, match="Unknown answer_extractor"):
        resolve_answer_extractor("boxed")
    with pytest.raises(TypeError, match="not hashable"):
        extract_answers(lambda text: [text], ["a"])
    pytest.importorskip("math_verify")
    # equal values vote together: a fraction and its decimal, a sum in either order
    assert math_answer(r"so \boxed{\frac{1}{2}}") == math_answer(r"\boxed{0.5}") == "1/2"
    assert math_answer(r"\boxed{x+1}") == math_answer(r"\boxed{1+x}")
    assert math_answer("no answer here") is None


def test_count_outcomes_groups_answers_per_problem(tiny):
    from trl_rlvr_ext.evaluation.answers import toy_answer
    from trl_rlvr_ext.evaluation.evaluator import count_outcomes
    from trl_rlvr_ext.rewards.toy import toy_accuracy_reward

    _, tokenizer = tiny
    rows = [dict(r) for r in problems(3)]  # answers "0", "2", "4"
    texts = [["[0]", "[1]", "[0]", "0"], ["[3]", "[3]", "x", "[2]"], ["[4]", "[4]", "[4]", "[4]"]]
    counts, classes = count_outcomes(
        FixedBackend(tokenizer, texts),
        tokenizer,
        rows,
        [toy_accuracy_reward],
        SamplingSettings(4),
        problems_per_batch=2,
        answer_extractor=toy_answer,
    )
    assert counts.tolist() == [2, 1, 4]
    assert classes == [[(2, 2), (1, 0)], [(2, 0), (1, 1)], [(4, 4)]]  # unmarked answers abstain
    counts, classes = count_outcomes(
        FixedBackend(tokenizer, texts),
        tokenizer,
        rows,
        [toy_accuracy_reward],
        SamplingSettings(4),
        problems_per_batch=2,
    )
    assert counts.tolist() == [2, 1, 4] and classes is None


def test_evaluate_pass_at_k_reports_pass_hat_k_maj_at_k_and_intervals(tiny_model_path, tmp_path):
    from trl_rlvr_ext.evaluation import load_results, maj_at_k, pass_hat_k, plot_pass_at_k, save_results

    sampling = SamplingSettings(num_samples=4, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=0)
    kwargs = {"sampling": sampling, "progress": False}
    result = evaluate_pass_at_k(
        tiny_model_path,
        problems(8),
        even_length_reward,
        answer_extractor=length_class,
        bootstrap_resamples=300,
        **kwargs,
    )
    n, c = result.num_samples, result.num_correct
    assert 0 < c.sum() < 32
    assert list(result.pass_hat_k) == list(result.pass_at_k) == [1, 2, 4]
    for k in (1, 2, 4):
        assert result.pass_hat_k[k] == pytest.approx(pass_hat_k(n, c, k).mean())
        assert result.maj_at_k[k] == pytest.approx(maj_at_k(result.answer_classes, n, k).mean())
    assert result.pass_hat_k[1] == pytest.approx(result.pass_at_k[1])
    assert all(sum(size for size, _ in problem) <= 4 for problem in result.answer_classes)
    assert set(result.intervals) == {f"{m}{k}" for m in ("pass@", "pass^", "maj@") for k in (1, 2, 4)}
    families = {"pass@": result.pass_at_k, "pass^": result.pass_hat_k, "maj@": result.maj_at_k}
    for name, (low, high) in result.intervals.items():
        family, k = name[:-1], int(name[-1])
        value = families[family][k]
        assert low <= value <= high, name
    assert result.config["confidence_level"] == 0.95 and result.config["bootstrap_resamples"] == 300
    # the JSON carries everything and reads back to the same result
    path = save_results([result], str(tmp_path / "r.json"))
    (loaded,) = load_results(path)
    assert loaded.to_dict() == result.to_dict()
    assert loaded.maj_at_k == result.maj_at_k and loaded.intervals == result.intervals
    data = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert list(data["pass_hat_k"]) == ["pass^1", "pass^2", "pass^4"] and data["intervals"]["maj@2"] == list(
        result.intervals["maj@2"]
    )
    # without an extractor (the default "auto" finds none for this reward) and without intervals
    plain = evaluate_pass_at_k(tiny_model_path, problems(8), even_length_reward, confidence_level=None, **kwargs)
    assert plain.num_correct.tolist() == c.tolist()  # same seed, same samples: the extras change nothing
    assert plain.maj_at_k is None and plain.answer_classes is None and plain.intervals == {}
    assert "maj_at_k" not in plain.to_dict() and "confidence_level" not in plain.config
    assert os.path.getsize(plot_pass_at_k([result, plain], str(tmp_path / "p.png"))) > 1000
    # with the toy task's reward, "auto" finds the toy extractor and maj@k is reported
    from trl_rlvr_ext.rewards.toy import toy_accuracy_reward

    toy = evaluate_pass_at_k(tiny_model_path, problems(2), toy_accuracy_reward, confidence_level=None, **kwargs)
    assert toy.config["answer_extractor"] == "toy_answer" and list(toy.maj_at_k) == [1, 2, 4]
    assert len(toy.answer_classes) == 2


def test_results_written_before_the_new_metrics_still_load(tmp_path):
    from trl_rlvr_ext.evaluation import load_results, plot_pass_at_k

    old = {
        "label": "old",
        "num_problems": 2,
        "pass_at_k": {"pass@1": 0.25, "pass@2": 0.5},
        "num_samples": [2, 2],
        "num_correct": [1, 0],
        "config": {"seed": 0},
    }
    (tmp_path / "old.json").write_text(json.dumps({"results": [old]}))
    (result,) = load_results(str(tmp_path / "old.json"))
    assert result.pass_at_k == {1: 0.25, 2: 0.5}
    assert result.pass_hat_k == {} and result.maj_at_k is None and result.intervals == {}
    assert result.num_correct.tolist() == [1, 0]
    assert os.path.getsize(plot_pass_at_k([result], str(tmp_path / "old.png"))) > 1000  # no bands, no error


def test_plot_draws_a_band_per_result_that_carries_intervals(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    from trl_rlvr_ext.evaluation import PassAtKResult, plot_pass_at_k

    calls = []
    fill_between = Axes.fill_between

    def spy(self, x, low, high, **kwargs):
        calls.append((list(x), list(low), list(high)))
        return fill_between(self, x, low, high, **kwargs)

    monkeypatch.setattr(Axes, "fill_between", spy)
    n, c = [4, 4, 4, 4], [0, 1, 3, 4]
    classes = [[(4, 0)], [(1, 1), (3, 0)], [(3, 3)], [(4, 4)]]
    banded = PassAtKResult.from_counts("a", n, c, answer_classes=classes, bootstrap_resamples=200)
    bare = PassAtKResult.from_counts("b", n, c, confidence_level=None)
    plot_pass_at_k([banded, bare], str(tmp_path / "p.png"))
    assert len(calls) == 1  # one band, for the result with intervals
    ks, low, high = calls[0]
    assert ks == [1, 2, 4]
    assert low == [banded.intervals[f"pass@{k}"][0] for k in ks]
    assert high == [banded.intervals[f"pass@{k}"][1] for k in ks]
    calls.clear()
    plot_pass_at_k([banded, bare], str(tmp_path / "m.png"), metric="maj@")  # `bare` has no maj@k: skipped
    assert len(calls) == 1 and calls[0][1] == [banded.intervals[f"maj@{k}"][0] for k in ks]
    with pytest.raises(ValueError, match="no maj@k curve"):
        plot_pass_at_k([bare], str(tmp_path / "x.png"), metric="maj@")
    with pytest.raises(ValueError, match="metric must be"):
        plot_pass_at_k([bare], str(tmp_path / "x.png"), metric="pass")


class FakeVLLMGeneration:
    """Stands in for TRL's `VLLMGeneration`: records each call and its sampling settings, returns scripted texts."""

    def __init__(self, tokenizer, texts_per_prompt):
        self.tokenizer, self.texts = tokenizer, texts_per_prompt
        self.temperature, self.top_p, self.top_k, self.min_p = 0.7, 0.9, 20, 0.05
        self.repetition_penalty, self.max_completion_length = 1.1, 99
        self.generation_kwargs = {"stop": ["\n"]}
        self.calls, self.syncs, self.seen = [], 0, 0

    def sync_weights(self):
        self.syncs += 1

    def generate(self, prompts, images, num_generations, profiler=None):
        settings = {name: getattr(self, name) for name in ("temperature", "top_p", "top_k", "max_completion_length")}
        self.calls.append({"prompts": prompts, "num_generations": num_generations, **settings})
        assert images is None and len(prompts) % num_generations == 0
        completion_ids = []
        for start in range(0, len(prompts), num_generations):
            assert all(p == prompts[start] for p in prompts[start : start + num_generations])  # whole groups
            texts = self.texts[self.seen]
            self.seen += 1
            completion_ids += [self.tokenizer(t)["input_ids"] for t in texts]
        return prompts, completion_ids, None, None


def test_callback_samples_through_the_trainers_vllm_engine(tiny):
    from types import SimpleNamespace

    from trl_rlvr_ext.evaluation import TrainerVLLMBackend, maj_at_k, pass_at_k, pass_hat_k

    _, tokenizer = tiny
    texts = [["ab", "a", "abcd", "ab"], ["a", "b", "c", ""], ["xy", "xy", "xy", "xy"]]
    engine = FakeVLLMGeneration(tokenizer, texts * 2)
    trainer = SimpleNamespace(
        use_vllm=True,
        vllm_generation=engine,
        accelerator=SimpleNamespace(process_index=0, num_processes=1, device=torch.device("cpu")),
        args=SimpleNamespace(max_completion_length=7),
        processing_class=tokenizer,
        state=SimpleNamespace(global_step=3),
        _last_loaded_step=0,
        model=None,
    )  # no `model_wrapped`: the transformers path would fail, so the test also shows it is not taken
    callback = PassAtKCallback(
        problems(3),
        even_length_reward,
        trainer=trainer,
        num_samples=4,
        temperature=1.0,
        top_p=0.95,
        batch_size=8,
        answer_extractor=length_class,
        bootstrap_resamples=100,
    )
    metrics = callback.evaluate()
    # the engine was synced once (the step moved), sampled with the callback's settings, and got them back after
    assert engine.syncs == 1 and trainer._last_loaded_step == 3
    assert [call["num_generations"] for call in engine.calls] == [4, 4]  # 2 problems per call (batch 8 / 4 samples)
    assert len(engine.calls[0]["prompts"]) == 8 and len(engine.calls[1]["prompts"]) == 4
    assert {(c["temperature"], c["top_p"], c["top_k"], c["max_completion_length"]) for c in engine.calls} == {
        (1.0, 0.95, 0, 7)
    }
    assert (engine.temperature, engine.top_p, engine.top_k, engine.min_p) == (0.7, 0.9, 20, 0.05)
    assert engine.max_completion_length == 99 and engine.generation_kwargs == {"stop": ["\n"]}
    # the numbers are those of the scripted completions: even lengths 3, 1, 4 of 4 (the empty text is even)
    n, c = [4, 4, 4], [3, 1, 4]
    classes = [[(2, 2), (2, 1)], [(3, 0)], [(4, 4)]]  # by length mod 3 ("a" and "abcd" share one); "" abstains
    assert callback.last_result.num_correct.tolist() == c and callback.last_result.answer_classes == classes
    for k in (1, 2, 4):
        assert metrics[f"eval/pass@{k}"] == pytest.approx(pass_at_k(n, c, k).mean())
        assert metrics[f"eval/pass^{k}"] == pytest.approx(pass_hat_k(n, c, k).mean())
        assert metrics[f"eval/maj@{k}"] == pytest.approx(maj_at_k(classes, n, k).mean())
        assert metrics[f"eval/pass@{k}_ci_low"] <= metrics[f"eval/pass@{k}"] <= metrics[f"eval/pass@{k}_ci_high"]
    # same step again: no new sync; the backend refuses a trainer without an engine
    callback.evaluate()
    assert engine.syncs == 1
    with pytest.raises(ValueError, match="no `vllm_generation`"):
        TrainerVLLMBackend(SimpleNamespace(vllm_generation=None, processing_class=tokenizer))
