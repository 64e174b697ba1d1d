"""`python -m lab study export`: a study's finished runs become its JSONL records, read back by the report."""

import json

import pytest

from lab.studies.records import export_records, read_records_text
from lab.studies.report import load_records


def _run(out, task, arm, seed, quick=False):
    path = out / task / arm / f"seed{seed}" / "result.json"
    path.parent.mkdir(parents=True)
    result = {"task": task, "arm": arm, "seed": seed, "quick": quick, "num_correct": [1, 0], "num_samples": 2}
    path.write_text(json.dumps(result, indent=1))


@pytest.mark.parametrize("name", ["records.jsonl", "records.jsonl.gz"])
def test_export_orders_by_task_arm_order_and_seed_and_reads_back(tmp_path, name):
    out = tmp_path / "runs"
    for task, arm, seed in [("toy", "nsr", 11), ("toy", "none", 11), ("toy", "nsr", 10), ("a", "zeta", 10)]:
        _run(out, task, arm, seed)
    path = tmp_path / name
    assert export_records(out, path, arm_order=["none", "nsr"]) == 4
    order = [(r["task"], r["arm"], r["seed"]) for r in load_records(path)]
    # tasks by name, then the study's arm order, then seeds; an arm the order does not name comes last
    assert order == [("a", "zeta", 10), ("toy", "none", 11), ("toy", "nsr", 10), ("toy", "nsr", 11)]
    first = path.read_bytes()
    export_records(out, path, arm_order=["none", "nsr"])
    assert path.read_bytes() == first  # the same runs give the same bytes (gzip without a timestamp)
    assert read_records_text(path).count("\n") == 4 and (path.suffix == ".gz") == (first[:2] == b"\x1f\x8b")


def test_export_refuses_quick_runs_and_an_empty_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="No finished run"):
        export_records(tmp_path, tmp_path / "r.jsonl")
    _run(tmp_path / "runs", "toy", "none", 0, quick=True)
    with pytest.raises(ValueError, match=r"1 quick \(smoke\) runs .* toy/none/seed0: not records"):
        export_records(tmp_path / "runs", tmp_path / "r.jsonl")
    assert not (tmp_path / "r.jsonl").exists()


def test_export_refuses_the_same_run_twice(tmp_path):
    # two output folders each holding a copy of one run: it would count twice on the pages
    _run(tmp_path / "a", "toy", "none", 0)
    _run(tmp_path / "b", "toy", "none", 0)
    _run(tmp_path / "b", "toy", "nsr", 0)
    with pytest.raises(ValueError, match=r"1 runs appear twice, identical, .* toy/none/seed0"):
        export_records([tmp_path / "a", tmp_path / "b"], tmp_path / "r.jsonl")
    assert not (tmp_path / "r.jsonl").exists()
    assert export_records(tmp_path / "b", tmp_path / "r.jsonl") == 2  # each run once: written


def test_committed_records_hold_no_run_twice():
    """No committed records file holds a byte-identical line twice (the audit found three in self.jsonl)."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "docs" / "evidence" / "data"
    files = sorted([*data.rglob("*.jsonl"), *data.rglob("*.jsonl.gz")])
    assert files
    for path in files:
        lines = [line for line in read_records_text(path).splitlines() if line.strip()]
        assert len(lines) == len(set(lines)), f"{path.name} holds a record twice"


def test_every_committed_record_says_where_it_comes_from():
    """Every record of ``docs/evidence/data`` carries its command with its arguments and, except in the files written
    before records carried one (`RECORDS_BEFORE_PROVENANCE`, each checked to hold none, so the list cannot hide a
    newer file), its provenance: time, commit, library versions, threads (the audit found the 9 trivial records of
    the real model's task without them: `trl-rlvr-ext baselines ` and no commit)."""
    from pathlib import Path

    from lab.studies.records import RECORDS_BEFORE_PROVENANCE, missing_provenance

    data = Path(__file__).resolve().parents[1] / "docs" / "evidence" / "data"
    files = sorted([*data.rglob("*.jsonl"), *data.rglob("*.jsonl.gz")])
    names = {path.relative_to(data).as_posix() for path in files}
    assert set(RECORDS_BEFORE_PROVENANCE) <= names, set(RECORDS_BEFORE_PROVENANCE) - names
    checked = 0
    for path in files:
        before = path.relative_to(data).as_posix() in RECORDS_BEFORE_PROVENANCE
        for number, line in enumerate(read_records_text(path).splitlines(), 1):
            record = json.loads(line)
            assert not missing_provenance(record, before), (path.name, number, missing_provenance(record, before))
            assert not (before and "provenance" in record), (
                f"{path.name}:{number} has provenance: not a file before it"
            )
            checked += 1
    assert checked > 500
    # the rule itself, on hand-made records
    made = {"command": "python -m lab baselines --records x", "provenance": dict.fromkeys(("time", "commit"), "t")}
    assert missing_provenance(made, False) == ["provenance.versions", "provenance.num_threads"]
    assert missing_provenance({"command": "trl-rlvr-ext baselines "}, True) == [
        "a command with its arguments (got 'trl-rlvr-ext baselines ')"
    ]
    assert missing_provenance({"command": "trl-rlvr-ext study self --tasks toy"}, True) == []
