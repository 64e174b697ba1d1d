"""``python -m lab screen``: the declared learnable-regime rule on synthetic records, the page rendered from records,
resuming, and the committed page against its records."""

import json
from pathlib import Path

import pytest

from lab.scripts import screen_tasks


ROOT = Path(__file__).resolve().parents[1]


def _record(base, trivial, dataset=screen_tasks.CANDIDATES[0]):
    return {
        "dataset": dataset,
        "base_model": "m",
        "settings": {"eval_problems": 4, "num_samples": 4},
        "pass_at_k": {"1": base[0], "4": base[1]},
        "intervals": {"pass@1": [0.0, 0.5], "pass@4": [0.1, 0.9]},
        "trivial": {name: {"pass_at_k": {"1": t[0], "4": t[1]}} for name, t in trivial.items()},
    }


@pytest.mark.parametrize(
    "base, trivial, verdict",
    [
        ((0.20, 0.60), {"a": (0.05, 0.30), "b": (0.01, 0.10)}, "learnable"),  # 0.30 <= 0.5 x 0.60
        ((0.20, 0.60), {"a": (0.05, 0.20), "b": (0.01, 0.31)}, "guessable"),  # the strongest at K is b: 0.31 > 0.30
        ((0.04, 0.30), {"a": (0.0, 0.0)}, "too hard"),
        ((0.61, 0.90), {"a": (0.0, 0.0)}, "too easy"),
        ((0.05, 0.30), {}, "no trivial policy"),  # the bounds are inclusive; without a guesser there is no test
    ],
)
def test_the_declared_rule(base, trivial, verdict):
    assert screen_tasks.screening_verdict(_record(base, trivial))[0] == verdict


def test_strongest_trivial_is_the_highest_policy_at_each_k():
    record = _record((0.2, 0.6), {"a": (0.05, 0.20), "b": (0.01, 0.31)})
    assert screen_tasks.strongest_trivial(record) == {1: 0.05, 4: 0.31}


def test_page_orders_by_the_declared_candidates_and_shows_each_number():
    second = _record((0.2, 0.6), {"a": (0.05, 0.3)}, dataset=screen_tasks.CANDIDATES[1])
    first = _record((0.1, 0.4), {"a": (0.02, 0.1)})
    page = screen_tasks.render_page([second, first])
    rows = [line for line in page.splitlines() if line.startswith(("| 0 |", "| 1 |"))]
    assert screen_tasks.CANDIDATES[0] in rows[0] and screen_tasks.CANDIDATES[1] in rows[1]
    assert "0.100 [0.000, 0.500]" in rows[0] and "0.400 [0.100, 0.900] (K=4)" in rows[0]
    assert "**learnable**" in rows[0] and "**guessable**" not in page


def test_bad_candidate_indices_fail_naming_the_choices():
    with pytest.raises(ValueError, match="from 0 to"):
        screen_tasks._candidate_indices("0,99")
    with pytest.raises(ValueError, match="'all'"):
        screen_tasks._candidate_indices("products")
    assert screen_tasks._candidate_indices("all") == list(range(len(screen_tasks.CANDIDATES)))


def test_every_declared_candidate_is_a_valid_name_with_a_trivial_policy():
    pytest.importorskip("reasoning_gym")
    from lab.studies.baselines import POLICIES
    from trl_rlvr_ext.tasks.reasoning_gym import parse_name

    for name in screen_tasks.CANDIDATES:
        spec = parse_name(name)
        assert spec.format == "chat" and spec.answer != "tags" and all(task in POLICIES for task in spec.tasks)


def test_render_only_reproduces_the_committed_page(tmp_path):
    records = ROOT / screen_tasks.RECORDS
    if not records.is_file():
        pytest.fail(f"{screen_tasks.RECORDS} is missing: run `python -m lab screen` (see docs/evidence/screening.md).")
    page = tmp_path / "screening.md"
    assert screen_tasks.cli_main(["--render", "--records", str(records), "--page", str(page)]) == 0
    assert page.read_text() == (ROOT / screen_tasks.PAGE).read_text()
    for record in screen_tasks.read_screening_records(records):
        assert record["dataset"] in screen_tasks.CANDIDATES and record["command"].startswith("trl-rlvr-ext screen")
        assert set(record["provenance"]) >= {"time", "commit", "versions", "num_threads", "weights_sha256"}


def test_resume_skips_a_recorded_candidate(tmp_path, monkeypatch):
    records = tmp_path / "s.jsonl"
    settings = {"eval_problems": 2, "num_samples": 2, "temperature": 0.7, "top_p": 1.0, "max_new_tokens": 4, "seed": 0}
    record = {**_record((0.1, 0.2), {}), "base_model": "toy:tiny", "settings": settings, "command": "c"}
    records.write_text(json.dumps(record) + "\n")
    monkeypatch.setattr(screen_tasks, "screen_candidate", lambda *a, **k: pytest.fail("a recorded run was rerun"))
    argv = ["--model", "toy:tiny", "--candidates", "0", "--eval_problems", "2", "--num_samples", "2"]
    argv += ["--max_new_tokens", "4", "--records", str(records), "--page", str(tmp_path / "p.md")]
    assert screen_tasks.cli_main(argv) == 0
    assert len(screen_tasks.read_screening_records(records)) == 1
