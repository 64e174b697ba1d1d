"""The sampling layer: `SamplingSettings` validation, the backend protocol, the one settings object accepted by the
public entry points, and the toy evaluation drawing exactly what its former own generate loop drew."""

import warnings
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset

from trl_rlvr_ext.curation.offline import score_dataset
from trl_rlvr_ext.evaluation import PassAtKCallback, evaluate_pass_at_k
from trl_rlvr_ext.evaluation.evaluator import DEFAULT_EVALUATION_SAMPLING
from trl_rlvr_ext.sampling import (
    NOT_GIVEN,
    GenerationBackend,
    SamplingSettings,
    ScoringBackend,
    TrainerVLLMBackend,
    TransformersBackend,
    render_prompt_ids,
    sampling_from_deprecated_keywords,
)
from trl_rlvr_ext.toy import evaluate_accuracy, make_model, make_task_datasets, make_tokenizer


def parity_reward(completions, **kwargs):
    """Depends on every character of the completion, so equal scores mean equal draws."""
    return [float(sum(map(ord, c)) % 2 == 0) for c in completions]


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_path), AutoTokenizer.from_pretrained(tiny_model_path)


# ---------------------------------------------------------------- settings
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_samples": 0}, ValueError, "num_samples must be a whole number of at least 1, got 0"),
        ({"num_samples": 2.0}, ValueError, "num_samples"),
        ({"num_samples": True}, ValueError, "num_samples"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be a whole number of at least 1"),
        ({"temperature": -0.1}, ValueError, "temperature must be a finite number of at least 0.*greedy=True"),
        ({"temperature": float("nan")}, ValueError, "temperature"),
        ({"temperature": "hot"}, TypeError, "temperature must be a number"),
        ({"top_p": 0.0}, ValueError, r"top_p must lie in \(0, 1\]"),
        ({"top_p": 1.5}, ValueError, "top_p"),
        ({"greedy": 1}, TypeError, "greedy must be True or False"),
        ({"seed": 1.5}, TypeError, "seed must be a whole number or None"),
    ],
)
def test_settings_refuse_what_no_backend_can_do(kwargs, error, match):
    with pytest.raises(error, match=match):
        SamplingSettings(**kwargs)


def test_settings_derivations():
    s = SamplingSettings(num_samples=8, temperature=0.6, top_p=0.95, max_new_tokens=12, seed=3)
    assert s.offset_seed(4) == SamplingSettings(8, 0.6, 0.95, 12, seed=7)
    assert SamplingSettings(seed=None).offset_seed(4).seed is None  # unseeded stays unseeded
    assert s.as_greedy() == SamplingSettings(1, 0.6, 0.95, 12, greedy=True, seed=3)
    assert s.to_dict() == {
        "num_samples": 8,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 12,
        "greedy": False,
        "seed": 3,
    }
    with pytest.raises(AttributeError):
        s.seed = 1  # frozen: a settings object passed down cannot be changed under its caller


def test_backends_implement_the_protocol(tiny):
    model, tokenizer = tiny
    backend = TransformersBackend(model, tokenizer)
    assert isinstance(backend, GenerationBackend) and isinstance(backend, ScoringBackend)
    engine = SimpleNamespace(generate=None)
    vllm = TrainerVLLMBackend(SimpleNamespace(vllm_generation=engine, processing_class=tokenizer))
    assert isinstance(vllm, GenerationBackend) and not isinstance(vllm, ScoringBackend)
    with pytest.raises(ValueError, match="greedy=True"):
        backend.generate(render_prompt_ids(tokenizer, ["1+1="]), SamplingSettings(temperature=0.0))


# ---------------------------------------------------------------- one settings object at the public entry points
def problems(n=4):
    return Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(n)], "answer": [str(2 * i) for i in range(n)]})


def test_evaluate_pass_at_k_takes_the_settings_as_one_value(tiny):
    model, tokenizer = tiny
    common = {"tokenizer": tokenizer, "progress": False, "confidence_level": None, "answer_extractor": None}
    sampling = SamplingSettings(num_samples=4, temperature=0.6, top_p=0.95, max_new_tokens=5, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the documented form warns about nothing
        packed = evaluate_pass_at_k(model, problems(), parity_reward, sampling=sampling, **common)
    # the former loose keywords: still accepted, the same draws, one FutureWarning that names the replacement
    with pytest.warns(FutureWarning) as caught:
        loose = evaluate_pass_at_k(model, problems(), parity_reward, num_samples=4, max_new_tokens=5, seed=3, **common)
    [warning] = [w for w in caught if issubclass(w.category, FutureWarning)]
    message = str(warning.message)
    assert (
        "num_samples, max_new_tokens, seed are deprecated" in message and "sampling=SamplingSettings(...)" in message
    )
    # spelled out: the settings the loose call used, ready to paste
    assert "sampling=SamplingSettings(num_samples=4, temperature=0.6, top_p=0.95, max_new_tokens=5, seed=3)" in message
    assert warning.filename == __file__  # points at the caller's line, the one to change
    assert packed.num_correct.tolist() == loose.num_correct.tolist() and packed.config == loose.config
    # neither form: the documented defaults (the former keywords' defaults), without a warning
    unset = dict.fromkeys(("num_samples", "temperature", "top_p", "max_new_tokens", "seed"), NOT_GIVEN)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sampling_from_deprecated_keywords(None, evaluate_pass_at_k, DEFAULT_EVALUATION_SAMPLING, unset) == (
            SamplingSettings(num_samples=16, temperature=0.6, top_p=0.95, max_new_tokens=1024, seed=0)
        )
    with pytest.raises(ValueError, match="sampling=SamplingSettings.*also temperature, seed"):
        evaluate_pass_at_k(model, problems(), parity_reward, temperature=1.0, seed=1, sampling=sampling, **common)
    with pytest.raises(ValueError, match="also seed"):  # seed=None (unseeded) is a value given, not "not given"
        evaluate_pass_at_k(model, problems(), parity_reward, seed=None, sampling=sampling, **common)
    with pytest.raises(TypeError, match="SamplingSettings"):
        evaluate_pass_at_k(model, problems(), parity_reward, sampling={"num_samples": 4}, **common)


def test_score_dataset_takes_the_settings_as_one_value(tiny, tmp_path):
    model, tokenizer = tiny
    data = problems(3)
    common = {"tokenizer": tokenizer, "progress": False, "shard_size": 2}
    loose = score_dataset(model, data, parity_reward, str(tmp_path / "a"), num_samples=3, max_new_tokens=4, **common)
    sampling = SamplingSettings(num_samples=3, max_new_tokens=4, seed=0)
    packed = score_dataset(model, data, parity_reward, str(tmp_path / "b"), sampling=sampling, **common)
    assert packed.to_dict() == loose.to_dict()
    with pytest.raises(ValueError, match="also num_samples"):
        score_dataset(model, data, parity_reward, str(tmp_path / "c"), num_samples=2, sampling=sampling, **common)
    with pytest.raises(ValueError, match="seeded, non-greedy"):
        score_dataset(model, data, parity_reward, str(tmp_path / "d"), sampling=SamplingSettings(seed=None), **common)


def test_callback_takes_the_settings_as_one_value():
    sampling = SamplingSettings(num_samples=4, max_new_tokens=9, seed=5)
    callback = PassAtKCallback(problems(), parity_reward, sampling=sampling)
    assert callback.sampling == sampling and callback.seed == 5 and not callback.max_new_tokens_from_trainer
    assert PassAtKCallback(problems(), parity_reward, num_samples=4).max_new_tokens_from_trainer
    with pytest.raises(ValueError, match="also max_new_tokens"):
        PassAtKCallback(problems(), parity_reward, max_new_tokens=9, sampling=sampling)


# ---------------------------------------------------------------- the toy evaluation on the shared loop
@torch.no_grad()
def former_toy_evaluation(
    model, tokenizer, dataset, num_samples, temperature, batch_size, seed, max_new_tokens, reward
):
    """The toy evaluation's own loop before it moved onto the sampling layer (greedy then sampled, batch by batch,
    one seeded RNG stream), kept as the reference its numbers must equal."""

    def generate(prompts, n, do_sample, **kwargs):
        enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        out = model.generate(
            **enc,
            do_sample=do_sample,
            num_return_sequences=n,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            max_new_tokens=max_new_tokens,
            **kwargs,
        )
        return tokenizer.batch_decode(out[:, enc["input_ids"].size(1) :], skip_special_tokens=True)

    prompts, answers = list(dataset["prompt"]), list(dataset["answer"])
    greedy, rates = [], []
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(prompts), batch_size):
            batch, gold = prompts[start : start + batch_size], answers[start : start + batch_size]
            greedy.extend(reward(completions=generate(batch, 1, False), answer=gold))
            texts = generate(batch, num_samples, True, temperature=temperature, top_k=0, top_p=1.0)
            rewards = reward(completions=texts, answer=[g for g in gold for _ in range(num_samples)])
            rates.extend(
                sum(rewards[i * num_samples : (i + 1) * num_samples]) / num_samples for i in range(len(batch))
            )
    return greedy, rates


@pytest.mark.parametrize("num_samples, temperature, batch_size, seed", [(3, 1.0, 4, 1), (5, 0.7, 8, 2)])
def test_toy_evaluation_draws_what_its_former_loop_drew(num_samples, temperature, batch_size, seed):
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=seed)
    dataset = make_task_datasets(num_train=5, num_test=13)["test"]  # 13: the last batch is a short one
    kwargs = {"num_samples": num_samples, "temperature": temperature, "batch_size": batch_size, "seed": seed}
    result = evaluate_accuracy(model, tokenizer, dataset, max_new_tokens=6, reward_func=parity_reward, **kwargs)
    greedy, rates = former_toy_evaluation(model, tokenizer, dataset, max_new_tokens=6, reward=parity_reward, **kwargs)
    assert result["per_problem_pass_rate"] == rates
    assert result["greedy_accuracy"] == sum(greedy) / len(greedy)
    assert 0 < result["pass@1"] < 1  # the reward reads the draws: equal rates are equal samples, not all-zero ones
    sampling = SamplingSettings(num_samples, temperature, max_new_tokens=6, seed=seed)
    packed = evaluate_accuracy(
        model, tokenizer, dataset, batch_size=batch_size, reward_func=parity_reward, sampling=sampling
    )
    assert packed == result
    with pytest.raises(ValueError, match="also seed"):
        evaluate_accuracy(model, tokenizer, dataset, seed=9, sampling=sampling)


def test_a_completion_takes_its_prompts_format():
    from trl_rlvr_ext.sampling import completion_in_format

    assert completion_in_format("42", conversational=False) == "42"
    assert completion_in_format("42", conversational=True) == [{"role": "assistant", "content": "42"}]
