"""The embedded default: tokenizer, task, reward, warm start cache, evaluation, and the demo entry point."""

import json
import random
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_rlvr_ext.rewards.toy import extract_toy_answer, toy_accuracy_reward
from trl_rlvr_ext.toy import make_model, make_tokenizer
from trl_rlvr_ext.toy import warmstart as warmstart_module
from trl_rlvr_ext.toy.evaluate import evaluate_accuracy
from trl_rlvr_ext.toy.task import (
    count_carries,
    forgetful_sum,
    format_answer,
    format_prompt,
    from_little_endian,
    is_held_out,
    make_task_datasets,
    to_little_endian,
)
from trl_rlvr_ext.toy.warmstart import CACHE_ENV_VAR, get_base_model_path, is_base_model_cached


# A warm start that takes about a second: enough to test the cache, not to learn anything.
TINY_WARMSTART = {
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "intermediate_size": 32,
    "num_steps": 3,
    "batch_size": 8,
    "warmup_steps": 1,
    "progress": False,
}


# ---------------------------------------------------------------- tokenizer
def test_tokenizer_round_trip_and_chat_template():
    tokenizer = make_tokenizer()
    text = "740+580=[2310]"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per byte, no special tokens added
    assert tokenizer.decode(ids) == text
    ids_eos = ids + [tokenizer.eos_token_id]
    assert tokenizer.decode(ids_eos, skip_special_tokens=True) == text
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "740+580="}], add_generation_prompt=True, tokenize=False
    )
    assert "<|im_start|>user\n740+580=<|im_end|>" in chat and chat.endswith("<|im_start|>assistant\n")


# ---------------------------------------------------------------- task
def test_little_endian_format():
    assert to_little_endian(132) == "231"
    assert to_little_endian(47, 3) == "740"
    assert from_little_endian("740") == 47
    assert format_prompt(47, 85, 3) == "740+580="
    assert format_answer(132, 3) == "2310"
    with pytest.raises(ValueError, match="width"):
        to_little_endian(1000, 3)


@pytest.mark.parametrize("a, b, carries", [(123, 456, 0), (47, 85, 2), (999, 1, 3), (5, 5, 1), (0, 0, 0), (95, 5, 2)])
def test_count_carries(a, b, carries):
    assert count_carries(a, b) == carries


def test_forgetful_sum():
    rng = random.Random(0)
    pairs = [(rng.randint(0, 999), rng.randint(0, 999)) for _ in range(200)]
    assert all(forgetful_sum(a, b, 0.0, rng) == a + b for a, b in pairs)
    # Always forgetting: each column is (a_i + b_i) mod 10.
    assert forgetful_sum(47, 85, 0.999999, rng) == 22
    assert forgetful_sum(999, 1, 0.999999, rng) == 990
    # One carry forgotten with probability q: correct about (1 - q) of the time.
    q = 0.6
    correct = sum(forgetful_sum(15, 5, q, rng) == 20 for _ in range(4000)) / 4000
    assert abs(correct - (1 - q)) < 0.03
    # Two carries: (1 - q)^2.
    correct = sum(forgetful_sum(95, 5, q, rng) == 100 for _ in range(4000)) / 4000
    assert abs(correct - (1 - q) ** 2) < 0.03


def _operands(prompt: str) -> tuple[int, int]:
    a, b = re.fullmatch(r"(\d+)\+(\d+)=", prompt).groups()
    return from_little_endian(a), from_little_endian(b)


def test_task_deterministic_disjoint_and_correct():
    first = make_task_datasets(num_train=300, num_test=60, seed=3)
    again = make_task_datasets(num_train=300, num_test=60, seed=3)
    other = make_task_datasets(num_train=300, num_test=60, seed=4)
    assert first["train"].to_dict() == again["train"].to_dict() and first["test"].to_dict() == again["test"].to_dict()
    assert first["train"]["prompt"] != other["train"]["prompt"]
    for split in ("train", "test"):
        ds = first[split]
        assert set(ds.column_names) == {"prompt", "answer", "num_carries", "idx"}
        assert ds["idx"] == list(range(len(ds)))
        assert len(set(ds["prompt"])) == len(ds)
        for prompt, answer, carries in zip(ds["prompt"], ds["answer"], ds["num_carries"]):
            a, b = _operands(prompt)
            assert len(prompt) == 8 and len(answer) == 4
            assert from_little_endian(answer) == a + b and count_carries(a, b) == carries
            assert is_held_out(a, b) == (split == "test")
    train_pairs = {frozenset(_operands(p)) for p in first["train"]["prompt"]}
    test_pairs = {frozenset(_operands(p)) for p in first["test"]["prompt"]}
    assert not train_pairs & test_pairs  # no problem, nor its commuted twin, in both splits
    assert len(set(first["test"]["num_carries"])) >= 3  # a spread of difficulty


def test_task_rejects_bad_dial():
    with pytest.raises(ValueError, match="min_digits"):
        make_task_datasets(min_digits=3, max_digits=2)
    with pytest.raises(ValueError, match="too few"):
        make_task_datasets(num_train=95, num_test=5, min_digits=1, max_digits=1)  # 100 pairs in all


# ---------------------------------------------------------------- reward
@pytest.mark.parametrize(
    "completion, reward",
    [
        ("[2310]", 1.0),  # correct
        (" [2310]\n", 1.0),  # surrounding whitespace is tolerated
        ("[2311]", 0.0),  # wrong
        ("2310", 0.0),  # unmarked
        ("[2310] because 7+5=12", 0.0),  # extra text after
        ("so [2310]", 0.0),  # extra text before
        ("[231]", 0.0),  # dropped digit
        ("[02310]", 0.0),  # extra digit: compared as strings
        ("[2310]]", 0.0),
        ("[23 10]", 0.0),
        ("[2310][2310]", 0.0),
        ("", 0.0),
    ],
)
def test_toy_reward_strictness(completion, reward):
    assert toy_accuracy_reward([completion], ["2310"]) == [reward]


def test_toy_reward_formats_and_errors():
    conversational = [[{"role": "assistant", "content": "[2310]"}], [{"role": "assistant", "content": "2310"}]]
    assert toy_accuracy_reward(conversational, ["2310", "2310"]) == [1.0, 0.0]
    assert toy_accuracy_reward(["[12]", "[13]"], ["12", "12"], prompts=["x", "y"], num_carries=[0, 0]) == [1.0, 0.0]
    assert extract_toy_answer("[0042]") == "0042" and extract_toy_answer("42") is None
    with pytest.raises(ValueError, match="one gold answer per completion"):
        toy_accuracy_reward(["[1]"], ["1", "2"])
    with pytest.raises(TypeError, match="standard format"):
        toy_accuracy_reward([42], ["42"])


# ---------------------------------------------------------------- warm start cache
def test_warmstart_builds_loadable_model_then_hits_cache(tmp_path, monkeypatch):
    settings = {k: v for k, v in TINY_WARMSTART.items() if k != "progress"}
    assert not is_base_model_cached(tmp_path, **settings)
    path = get_base_model_path(cache_dir=tmp_path, **TINY_WARMSTART)
    assert is_base_model_cached(tmp_path, **settings)
    assert Path(path).parent == tmp_path / "toy"
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.hidden_size == 16 and tokenizer.eos_token == "<|im_end|>"
    metadata = json.loads((Path(path) / "warmstart.json").read_text())
    assert metadata["settings"]["num_steps"] == 3
    assert [p.name for p in (tmp_path / "toy").iterdir()] == [Path(path).name]  # no temporary directory left

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the cached base model was rebuilt")

    monkeypatch.setattr(warmstart_module, "train_base_model", no_rebuild)
    assert get_base_model_path(cache_dir=tmp_path, **TINY_WARMSTART) == path
    # Other settings, other directory (and here: a rebuild, which the patch turns into an error).
    with pytest.raises(AssertionError, match="rebuilt"):
        get_base_model_path(cache_dir=tmp_path, **{**TINY_WARMSTART, "forget_carry_prob": 0.1})
    # The environment variable sets the cache root when no cache_dir is given.
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    assert get_base_model_path(**TINY_WARMSTART) == path


def test_warmstart_interrupted_build_leaves_no_cache(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(warmstart_module, "train_base_model", interrupted)
    with pytest.raises(KeyboardInterrupt):
        get_base_model_path(cache_dir=tmp_path, **TINY_WARMSTART)
    assert list((tmp_path / "toy").iterdir()) == []


def test_warmstart_refuses_to_overwrite_an_incomplete_directory(tmp_path):
    settings = {k: v for k, v in TINY_WARMSTART.items() if k != "progress"}
    stray = tmp_path / "toy" / warmstart_module.WarmStartSettings(**settings).digest()
    stray.mkdir(parents=True)
    (stray / "config.json").write_text("{}")  # not a complete build: no warmstart.json
    with pytest.raises(RuntimeError, match="delete it"):
        get_base_model_path(cache_dir=tmp_path, **TINY_WARMSTART)
    assert sorted(p.name for p in (tmp_path / "toy").iterdir()) == [stray.name]


def test_warmstart_rejects_bad_settings(tmp_path):
    with pytest.raises(TypeError, match="settings are"):
        get_base_model_path(cache_dir=tmp_path, hiden_size=3)
    with pytest.raises(ValueError, match="forget_carry_prob"):
        get_base_model_path(cache_dir=tmp_path, forget_carry_prob=1.0)
    with pytest.raises(ValueError, match="min_digits"):
        get_base_model_path(cache_dir=tmp_path, min_digits=3, max_digits=2)
    assert not (tmp_path / "toy").exists()  # rejected before anything is built


# ---------------------------------------------------------------- evaluation
def test_evaluate_accuracy_shapes_determinism_and_rng():
    tokenizer = make_tokenizer()
    model = make_model(tokenizer)
    model.train()
    dataset = make_task_datasets(num_train=5, num_test=6)["test"]
    torch.manual_seed(123)
    result = evaluate_accuracy(model, tokenizer, dataset, num_samples=3, batch_size=4, seed=1)
    after_eval = torch.rand(1)
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), after_eval)  # the training RNG is untouched
    assert model.training  # mode restored
    assert result["num_problems"] == 6 and result["num_samples"] == 3
    assert len(result["per_problem_pass_rate"]) == 6
    assert all(r in (0.0, 1 / 3, 2 / 3, 1.0) for r in result["per_problem_pass_rate"])
    for key in ("greedy_accuracy", "pass@1", "pass@3"):
        assert 0.0 <= result[key] <= 1.0
    assert set(result["pass@1_by_num_carries"]) == set(dataset["num_carries"])
    assert evaluate_accuracy(model, tokenizer, dataset, num_samples=3, batch_size=4, seed=1) == result


def test_evaluate_accuracy_counts_correct_answers():
    """With a reward that accepts anything, every problem is solved: the counting is right."""
    tokenizer = make_tokenizer()
    model = make_model(tokenizer)
    dataset = make_task_datasets(num_train=5, num_test=4)["test"]
    result = evaluate_accuracy(
        model, tokenizer, dataset, num_samples=2, reward_func=lambda completions, answer, **kw: [1.0] * len(answer)
    )
    assert result["greedy_accuracy"] == result["pass@1"] == result["pass@2"] == 1.0


# ---------------------------------------------------------------- demo
def test_demo_quick_end_to_end(tmp_path, capsys):
    from trl_rlvr_ext.scripts.demo import cli_main

    output_dir = tmp_path / "demo"
    argv = ["--quick", "--output-dir", str(output_dir), "--cache-dir", str(tmp_path / "cache"), "--max-steps", "2"]
    argv += ["--warmstart-steps", "3", "--hidden-size", "16", "--num-hidden-layers", "1", "--intermediate-size", "32"]
    argv += ["--num-train", "64", "--num-prompts", "4", "--num-generations", "4", "--steps-per-generation", "2"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "greedy accuracy" in out and "sampled pass@1" in out and str(output_dir) in out
    assert "Clip recovery (nsr)" in out
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["clip_recovery"] == "nsr" and summary["before"]["num_problems"] == 50
    records = [json.loads(line) for line in (output_dir / "logs.jsonl").read_text().splitlines()]
    assert any("reward" in r for r in records) and sum("heldout" in r for r in records) == 2
    assert AutoModelForCausalLM.from_pretrained(output_dir).config.hidden_size == 16
    assert AutoTokenizer.from_pretrained(output_dir).eos_token == "<|im_end|>"


def test_demo_rejects_bad_arguments(capsys):
    from trl_rlvr_ext.scripts.demo import cli_main

    with pytest.raises(SystemExit):
        cli_main(["--num-prompts", "3", "--num-generations", "3", "--steps-per-generation", "2"])
    assert "divisible" in capsys.readouterr().err


# ---------------------------------------------------------------- size preset ($TRL_RLVR_EXT_TOY_SIZE)
def test_toy_size_preset_parsing(monkeypatch):
    from trl_rlvr_ext.toy import SIZE_ENV_VAR, toy_size

    monkeypatch.delenv(SIZE_ENV_VAR, raising=False)
    assert toy_size() == "full"
    monkeypatch.setenv(SIZE_ENV_VAR, "")
    assert toy_size() == "full"
    monkeypatch.setenv(SIZE_ENV_VAR, " Smoke ")
    assert toy_size() == "smoke"
    monkeypatch.setenv(SIZE_ENV_VAR, "tiny")
    with pytest.raises(ValueError, match=r"TRL_RLVR_EXT_TOY_SIZE='tiny' is not a toy size preset.*'full', 'smoke'"):
        toy_size()
    with pytest.raises(ValueError, match="not a toy size preset"):
        make_task_datasets()  # every default that depends on it says so


def test_smoke_preset_shrinks_task_defaults_to_the_first_rows(monkeypatch):
    from trl_rlvr_ext.toy.size import SIZE_ENV_VAR

    monkeypatch.delenv(SIZE_ENV_VAR, raising=False)
    full = make_task_datasets()
    assert (len(full["train"]), len(full["test"])) == (2000, 200)
    monkeypatch.setenv(SIZE_ENV_VAR, "smoke")
    smoke = make_task_datasets()
    assert (len(smoke["train"]), len(smoke["test"])) == (64, 50)
    assert smoke["train"].to_dict() == full["train"].select(range(64)).to_dict()
    assert smoke["test"].to_dict() == full["test"].select(range(50)).to_dict()
    # explicit sizes win over the preset
    assert (len(make_task_datasets(num_train=7)["train"]), len(make_task_datasets(num_test=300)["test"])) == (7, 300)


def test_smoke_preset_changes_base_model_defaults_only(tmp_path, monkeypatch):
    from trl_rlvr_ext.toy.size import SIZE_ENV_VAR, SMOKE_WARMSTART

    monkeypatch.setenv(SIZE_ENV_VAR, "smoke")
    path = get_base_model_path(cache_dir=tmp_path, progress=False)
    settings = json.loads((Path(path) / "warmstart.json").read_text())["settings"]
    assert {k: settings[k] for k in SMOKE_WARMSTART} == SMOKE_WARMSTART
    assert settings["forget_carry_prob"] == 0.6 and settings["max_digits"] == 3  # the rest: the usual defaults
    assert AutoModelForCausalLM.from_pretrained(path).config.hidden_size == 32
    assert is_base_model_cached(tmp_path)
    # explicit settings win; the full preset is another cache entry, never the smoke one
    explicit = {k: v for k, v in TINY_WARMSTART.items() if k != "progress"}
    tiny = get_base_model_path(cache_dir=tmp_path, progress=False, **explicit)
    assert json.loads((Path(tiny) / "warmstart.json").read_text())["settings"]["num_steps"] == 3
    monkeypatch.setenv(SIZE_ENV_VAR, "full")
    assert not is_base_model_cached(tmp_path)
    assert is_base_model_cached(tmp_path, **explicit)  # fully specified: the preset does not matter
