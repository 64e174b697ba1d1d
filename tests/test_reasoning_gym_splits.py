"""Held-out splits of ``reasoning_gym:`` names: their composition over the generator's options, near-duplicate
filtering (``dedup=near``), stratified drawing (``stratify=true``), and defaults that stay as they were."""

import hashlib
import json
from collections import Counter

import pytest

from trl_rlvr_ext.data import load_named_dataset


pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")

from trl_rlvr_ext.tasks.reasoning_gym import (
    near_duplicate_flags,
    near_duplicate_key,
    parse_name,
    split_composition,
    split_composition_markdown,
)


# 1-digit chain sums of 2 or 3 terms: only 200 two-term questions, so 300 train draws use up many of them
CHAIN = "reasoning_gym:chain_sum?min_terms=2&max_terms=3&min_digits=1&max_digits=1&size=300&test_size=40"


def _multiset(entry: dict) -> tuple:
    """The signed terms of a chain_sum entry, sorted: written out here, independently of the loader."""
    tokens = entry["metadata"]["expression"].split()
    terms = [int(tokens[0])] + [int(t) * (1 if op == "+" else -1) for op, t in zip(tokens[1::2], tokens[2::2])]
    return tuple(sorted(terms))


def _entries(split) -> list[dict]:
    return [json.loads(e) for e in split["entry"]]


def test_defaults_are_unchanged():
    """A name without the new options draws exactly what it drew before them (the records stay reproducible)."""
    name = (
        "reasoning_gym:chain_sum+number_sorting?size=60&test_size=20&chain_sum.max_terms=3&chain_sum.max_digits=1"
        "&number_sorting.max_numbers=3&strip_template=true"
    )
    splits = load_named_dataset(name)
    payload = json.dumps([splits[k].to_dict() for k in ("train", "test")], sort_keys=True).encode()
    assert hashlib.sha256(payload).hexdigest()[:16] == "d4b9519b53b8fe9f"
    assert load_named_dataset(name + "&dedup=exact&stratify=false")["test"]["prompt"] == splits["test"]["prompt"]


def test_composition_counts_strata_and_the_near_duplicates_left_in():
    splits = load_named_dataset(CHAIN)
    composition = split_composition(CHAIN, eval_problems=25)
    train, test = _entries(splits["train"]), _entries(splits["test"])
    by_terms = {split: Counter(e["metadata"]["num_terms"] for e in rows) for split, rows in (("train", train),)}
    by_terms["test"] = Counter(e["metadata"]["num_terms"] for e in test)
    by_terms["eval"] = Counter(e["metadata"]["num_terms"] for e in test[:25])
    for terms in (2, 3):
        label = f"chain_sum num_digits=1 num_terms={terms}"
        assert composition["strata"][label] == {split: by_terms[split][terms] for split in ("train", "test", "eval")}
    assert composition["eval_strata"] == [
        f"chain_sum num_digits=1 num_terms={e['metadata']['num_terms']}" for e in test[:25]
    ]
    # the default (dedup=exact) keeps reorderings of train problems: counted here by hand
    train_keys = {_multiset(e): e["answer"] for e in train}
    near = [e for e in test[:25] if _multiset(e) in train_keys]
    assert composition["eval_near_duplicates"] == len(near) > 0
    assert composition["eval_near_duplicates_same_answer"] == sum(
        train_keys[_multiset(e)] == e["answer"] for e in near
    )
    assert composition["dropped"]["exact"] > 0 and composition["dropped"]["near"] == 0
    # the skew this option set exists for: two-term problems are rarer held out than in train
    assert by_terms["test"][2] / len(test) < by_terms["train"][2] / len(train) - 0.2
    markdown = split_composition_markdown(CHAIN, eval_problems=25)
    assert "| stratum | train (300) | held out (40) | evaluated (25) |" in markdown
    assert f"{composition['eval_near_duplicates']} are a reordering of a train problem" in markdown


def test_near_duplicate_flags_mark_the_reorderings_of_a_train_problem_by_row():
    splits = load_named_dataset(CHAIN)
    train, test = _entries(splits["train"]), _entries(splits["test"])
    train_keys = {_multiset(e) for e in train}
    flags = near_duplicate_flags(CHAIN, 5, 30)
    assert flags == [_multiset(e) in train_keys for e in test[5:30]] and any(flags) and not all(flags)
    assert sum(near_duplicate_flags(CHAIN, 0, 25)) == split_composition(CHAIN, 25)["eval_near_duplicates"]
    assert not any(near_duplicate_flags(CHAIN + "&dedup=near", 0, 40))
    with pytest.raises(ValueError, match="it has 40 held-out problems"):
        near_duplicate_flags(CHAIN, 30, 41)


def test_near_dedup_drops_reorderings_of_train_and_held_out_problems():
    splits = load_named_dataset(CHAIN + "&dedup=near")
    train, test = _entries(splits["train"]), _entries(splits["test"])
    assert len(test) == 40
    train_keys = {_multiset(e) for e in train}
    assert not any(_multiset(e) in train_keys for e in test)
    assert len({_multiset(e) for e in test}) == len(test)  # no two held-out problems are reorderings of each other
    composition = split_composition(CHAIN + "&dedup=near")
    assert composition["dropped"]["near"] > 0 and composition["eval_near_duplicates"] == 0


def test_near_duplicate_keys_by_hand():
    def chain(expression):
        return {"question": f"x {expression} =", "metadata": {"expression": expression}}

    assert near_duplicate_key(chain("4 - 1 + 3"), "chain_sum") == near_duplicate_key(chain("3 + 4 - 1"), "chain_sum")
    assert near_duplicate_key(chain("4 - 1 + 3"), "chain_sum") != near_duplicate_key(chain("4 + 1 - 3"), "chain_sum")

    def sorting(numbers, direction):
        return {"question": f"Sort {direction}", "metadata": {"original_numbers": numbers, "direction": direction}}

    key = near_duplicate_key(sorting(["9.0", "83.0", "25.0"], "ascending"), "number_sorting")
    assert key == near_duplicate_key(sorting(["25.0", "9.0", "83.0"], "descending"), "number_sorting")
    assert key != near_duplicate_key(sorting(["25.0", "9.0", "84.0"], "ascending"), "number_sorting")
    # any other task: the question up to case and whitespace
    assert near_duplicate_key({"question": "How  many\nBits?"}, "count_bits") == ("count_bits", "how many bits?")


def test_stratify_matches_the_train_composition():
    name = "reasoning_gym:chain_sum?min_terms=2&max_terms=3&min_digits=1&max_digits=2&size=200&test_size=40"
    composition = split_composition(name + "&stratify=true&dedup=near")
    assert composition["test_size"] == 40 and composition["dropped"]["stratum_full"] > 0
    for label, counts in composition["strata"].items():
        assert abs(counts["test"] - 40 * counts["train"] / 200) < 1, (label, counts)
    mixture = (
        "reasoning_gym:chain_sum+number_sorting?size=100&test_size=20&chain_sum.max_digits=2"
        "&number_sorting.max_numbers=4&stratify=true"
    )
    tasks = Counter(load_named_dataset(mixture)["train"]["task"])
    held_out = Counter(load_named_dataset(mixture)["test"]["task"])
    assert all(abs(held_out[task] - 20 * tasks[task] / 100) < 1 for task in tasks), (tasks, held_out)


def test_stratify_fails_naming_an_exhausted_stratum():
    # ten 1-term questions, all in 200 train draws: no held-out share for them can be found
    name = "reasoning_gym:chain_sum?min_terms=1&max_terms=2&min_digits=1&max_digits=1&size=200&test_size=20"
    with pytest.raises(ValueError, match=r"short of their share are \['chain_sum num_digits=1 num_terms=1: 0 of"):
        load_named_dataset(name + "&stratify=true")


def test_bad_option_values_name_the_choices():
    with pytest.raises(ValueError, match=r"dedup='fuzzy'.*\['exact', 'near'\]"):
        parse_name("reasoning_gym:chain_sum?dedup=fuzzy")
    with pytest.raises(TypeError, match="stratify=1 .*true or false"):
        parse_name("reasoning_gym:chain_sum?stratify=1")


def test_results_per_stratum_by_hand():
    from lab.studies.strata import stratum_pass_at_k, stratum_table_markdown

    record = {"arm": "base", "seed": 0, "num_samples": 4, "num_correct": [4, 0, 2, 1], "sizes": {}}
    strata = ["a", "b", "a", "b"]
    split = stratum_pass_at_k(record, strata, ks=[1, 4])
    # pass@1 = mean c/n; pass@4 of n = 4 samples: 1 when any is correct
    assert split == {
        "a": {"problems": 2, "pass_at_k": {"1": (1 + 0.5) / 2, "4": 1.0}},
        "b": {"problems": 2, "pass_at_k": {"1": (0 + 0.25) / 2, "4": 0.5}},
    }
    with pytest.raises(ValueError, match="exactly the problems"):
        stratum_pass_at_k(record, strata[:3])
    other = {**record, "seed": 1, "num_correct": [2, 2, 2, 2]}
    table = stratum_table_markdown([record, record, other], strata, ks=(1, 4, 16))  # a run recorded twice counts once
    assert "| base | a | 2 | 0,1 | 0.625 ± 0.177 | 1.000 ± 0.000 |" in table and "pass@16" not in table
