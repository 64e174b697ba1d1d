"""Offline curation: scores per prompt, filters, the CLI, and resuming an interrupted run without recomputation."""

import json

import numpy as np
import pytest
import torch
from datasets import Dataset, load_from_disk

from trl_rlvr_ext.curation import offline
from trl_rlvr_ext.curation.offline import filter_scored, score_dataset, score_rows
from trl_rlvr_ext.evaluation.generation import TransformersBackend, render_prompt_ids
from trl_rlvr_ext.sampling import SamplingSettings
from trl_rlvr_ext.scripts.curate import cli_main


def parity_reward(completions, idx, **kwargs):
    """Verifiable per (prompt, completion), and right about half the time for a random tiny model."""
    return [float((i + sum(map(ord, c))) % 2 == 0) for i, c in zip(idx, completions)]


def problems(n=10):
    return Dataset.from_dict({"prompt": [f"{i}*3=" for i in range(n)], "idx": list(range(n))})


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_path), AutoTokenizer.from_pretrained(tiny_model_path)


def test_scores_match_their_definitions(tiny):
    model, tokenizer = tiny
    rows = [dict(r) for r in problems(4)]
    backend = TransformersBackend(model, tokenizer, batch_size=16)
    scores = score_rows(backend, tokenizer, rows, [parity_reward], SamplingSettings(6, max_new_tokens=5, seed=3))
    ids = render_prompt_ids(tokenizer, [r["prompt"] for r in rows])
    sampled = backend.generate(ids, SamplingSettings(6, max_new_tokens=5, seed=3))  # the same draws
    greedy = backend.generate(ids, SamplingSettings(1, greedy=True, max_new_tokens=5))
    for row, score, samples, g in zip(rows, scores, sampled, greedy):
        texts = tokenizer.batch_decode(samples, skip_special_tokens=True)
        correct = parity_reward(texts, [row["idx"]] * 6)
        assert score["num_correct"] == sum(correct) and score["pass_rate"] == pytest.approx(sum(correct) / 6)
        assert score["greedy_correct"] == bool(
            parity_reward(tokenizer.batch_decode(g, skip_special_tokens=True), [row["idx"]])[0]
        )
        right = [s for s, c in zip(samples, correct) if c]
        if not right:
            assert score["correct_mean_logprob"] is None
            continue
        # mean over correct samples of the mean token log-likelihood, computed here one sequence at a time
        values = []
        for completion in right:
            seq = torch.tensor([list(ids[rows.index(row)]) + completion])
            with torch.no_grad():
                logps = torch.log_softmax(model(seq).logits[0, :-1].float(), -1)
            p = len(ids[rows.index(row)])
            values.append(logps[torch.arange(p - 1, seq.size(1) - 1), seq[0, p:]].mean().item())
        assert score["correct_mean_logprob"] == pytest.approx(float(np.mean(values)), rel=1e-4)
    assert any(s["correct_mean_logprob"] is not None for s in scores)


def test_interrupted_run_resumes_without_recomputing(tiny_model_path, tmp_path, monkeypatch):
    data = problems(10)
    kwargs = {"num_samples": 4, "max_new_tokens": 5, "shard_size": 3, "progress": False}
    reference = score_dataset(tiny_model_path, data, parity_reward, str(tmp_path / "clean"), **kwargs)

    calls = []
    real = offline._score_shard

    def counting(*args):
        calls.append(args[-1])  # the shard's seed = seed + shard index
        if len(calls) == 3:
            raise KeyboardInterrupt  # interrupted while scoring the third shard
        return real(*args)

    monkeypatch.setattr(offline, "_score_shard", counting)
    out = str(tmp_path / "interrupted")
    with pytest.raises(KeyboardInterrupt):
        score_dataset(tiny_model_path, data, parity_reward, out, **kwargs)
    shards = sorted((tmp_path / "interrupted" / "shards").iterdir())
    assert [p.name for p in shards] == ["shard-00000.jsonl", "shard-00001.jsonl"]  # no partial file left behind
    calls.clear()
    monkeypatch.setattr(offline, "_score_shard", lambda *args: (calls.append(args[-1]), real(*args))[1])
    resumed = score_dataset(tiny_model_path, data, parity_reward, out, **kwargs)
    assert calls == [2, 3]  # only the unfinished shards (seeds 0 + 2, 0 + 3) were scored
    for column in ("pass_rate", "num_correct", "greedy_correct", "correct_mean_logprob"):
        assert resumed[column] == reference[column]
    assert load_from_disk(out + "/scored")["pass_rate"] == reference["pass_rate"]
    with pytest.raises(ValueError, match="other settings"):
        score_dataset(tiny_model_path, data, parity_reward, out, **{**kwargs, "num_samples": 8})


def test_filters():
    scored = Dataset.from_dict(
        {"pass_rate": [0.0, 0.125, 0.5, 0.625, 1.0], "greedy_correct": [False, True, False, True, True]}
    )
    assert filter_scored(scored, 0.1, 0.6)["pass_rate"] == [0.125, 0.5]
    assert filter_scored(scored, 1 / 8, 1 - 1 / 8)["pass_rate"] == [0.125, 0.5, 0.625]
    assert filter_scored(scored, drop_greedy_correct=True)["pass_rate"] == [0.0, 0.5]
    assert len(filter_scored(scored)) == 5


def test_cli_scores_filters_and_saves(tiny_model_path, tmp_path, capsys):
    data_path = tmp_path / "problems.jsonl"
    problems(6).to_json(str(data_path))
    out = tmp_path / "curated"
    code = cli_main(
        [
            "--model",
            tiny_model_path,
            "--dataset",
            str(data_path),
            "--reward_funcs",
            f"{__name__}.parity_reward",
            "--output_dir",
            str(out),
            "--num_samples",
            "4",
            "--max_new_tokens",
            "5",
            "--shard_size",
            "4",
            "--min_pass_rate",
            "0.25",
            "--max_pass_rate",
            "0.75",
        ]
    )
    assert code == 0
    scored, filtered = load_from_disk(str(out / "scored")), load_from_disk(str(out / "filtered"))
    assert len(scored) == 6 and set(scored.column_names) >= {"prompt", "idx", "pass_rate", "greedy_correct"}
    assert all(0.25 <= p <= 0.75 for p in filtered["pass_rate"])
    assert len(filtered) == sum(0.25 <= p <= 0.75 for p in scored["pass_rate"])
    assert "kept" in capsys.readouterr().out
    with open(out / "curate_meta.json") as f:
        assert json.load(f)["num_samples"] == 4


def test_cli_settings_clash_says_what_differs_without_a_traceback(tiny_model_path, tmp_path, capsys):
    data_path = tmp_path / "problems.jsonl"
    problems(2).to_json(str(data_path))
    argv = [
        "--model", tiny_model_path, "--dataset", str(data_path), "--reward_funcs", f"{__name__}.parity_reward",
        "--output_dir", str(tmp_path / "curated"), "--num_samples", "2", "--max_new_tokens", "3",
    ]  # fmt: skip
    assert cli_main(argv) == 0
    capsys.readouterr()
    assert cli_main([*argv, "--num_samples", "4", "--temperature", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "--num_samples: 2 there, 4 now" in err and "--temperature: 1.0 there, 0.5 now" in err
    assert "another --output_dir" in err and "To resume it" in err and "Traceback" not in err
    assert cli_main(argv) == 0  # the same settings resume (nothing left to score)


def test_cli_checks_the_model_and_dataset_before_scoring(tiny_model_path, tmp_path, capsys):
    data_path = tmp_path / "problems.jsonl"
    problems(2).to_json(str(data_path))
    base = ["--reward_funcs", f"{__name__}.parity_reward", "--output_dir", str(tmp_path / "out")]
    assert cli_main(["--model", str(tmp_path / "missing" / "model"), "--dataset", str(data_path), *base]) == 2
    assert "missing/model" in capsys.readouterr().err
    assert cli_main(["--model", tiny_model_path, "--dataset", str(tmp_path / "nope.jsonl"), *base]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing was started
