"""The evidence pages are rendered from their records (`lab.studies.report`): every committed page equals
what its records render, and the renderer does what it says on small synthetic records with a known answer."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lab.studies import get_study
from lab.studies.report import (
    PAGES,
    TRIVIAL_RECORDS,
    apply_requirements,
    fill,
    group_verdict,
    judge_parts,
    judged_problems,
    load_records,
    render_study,
    setting_records,
    stale_pages,
)


ROOT = Path(__file__).resolve().parents[1]


def test_every_committed_page_equals_what_its_records_render():
    """The test the issue asks for: a page whose tables, intervals or verdicts differ from its records fails here.
    Rerender with `python -m lab study report all`."""
    assert stale_pages(ROOT) == [], "rerender with: python -m lab study report all"


def test_a_changed_number_in_a_rendered_block_is_caught(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / PAGES["lora_init"].path
    text = page.read_text()
    start = text.index("<!-- rendered: lora_init:main:number_sorting:pass_at_k -->")
    row = text.index("| base |", start)
    page.write_text(text[:row] + "| base | 0,1,2 | 0.999" + text[row + len("| base | 0,1,2 | 0.424") :])
    assert stale_pages(tmp_path) == [PAGES["lora_init"].path]
    # prose outside the markers is the page's own: changing it changes nothing the renderer checks
    page.write_text(text.replace("## Setup", "## Setup (edited)"))
    assert stale_pages(tmp_path) == []


def _record(arm, seed, num_correct, task="toy", num_samples=8, sizes=None, **extra):
    return {
        "study": "synthetic",
        "task": task,
        "arm": arm,
        "seed": seed,
        "num_correct": num_correct,
        "num_samples": num_samples,
        "pass_at_k": {},
        "train_log": [],
        "boundary": [],
        "sizes": sizes or {},
        "command": f"trl-rlvr-ext study x --arms {arm}",
        "train_seconds": 1.0,
        "wall_seconds": 10.0 + seed,
        **extra,
    }


def _write_others_empty(root: Path, study: str) -> None:
    """An empty records file for every setting of ``study``'s page that a synthetic test did not write."""
    for setting in PAGES[study].settings:
        for path in setting.records:
            if not (root / path).exists():
                _write(root, path, [])


def _write(root: Path, path: str, records: list[dict]) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in records)
    if path.endswith(".gz"):
        (root / path).write_bytes(gzip.compress(text.encode()))
    else:
        (root / path).write_text(text)


NSR_SIZES = {"learning_rate": 3e-4}


def _nsr_records(rng, effect_problems: int, num_problems: int = 60) -> list[dict]:
    """``none`` solves each problem in half its samples; ``nsr`` solves ``effect_problems`` of them in every sample."""
    records = []
    for seed in range(3):
        base = rng.integers(3, 6, size=num_problems)
        better = base.copy()
        better[:effect_problems] = 8
        records.append(_record("none", seed, base.tolist(), sizes=NSR_SIZES))
        # stored as a JSON string of the list, as some records are
        records.append(_record("nsr", seed, json.dumps(better.tolist()), sizes=NSR_SIZES))
    return records


def test_synthetic_records_render_and_judge_as_constructed(tmp_path):
    """A large gain of `nsr` over `none` is reproduced; arms identical on every seed and problem are no test (the
    design measured no variation; the rule judged them "not reproduced" before v3); a claim whose arm did not run
    gives no part."""
    rng = np.random.default_rng(0)
    path = PAGES["nsr"].settings[0].records[0]
    _write(tmp_path, path, _nsr_records(rng, effect_problems=30))
    for other in PAGES["nsr"].settings[1:]:
        _write(tmp_path, other.records[0], [])
    blocks, parts = render_study("nsr", tmp_path)
    assert [(p.claim.arm, p.claim.baseline, p.task) for p in parts] == [("nsr", "none", "toy")]  # no nsr_expected
    judgement = parts[0].judgement
    assert judgement.verdict == "reproduced" and judgement.low > 0.049
    assert judgement.num_seeds == 3 and judgement.num_problems == 60
    table = blocks["nsr:lr3e-4:toy:pass_at_k"]
    none_row = next(line for line in table.splitlines() if line.startswith("| none |"))
    expected = np.mean([np.mean(np.asarray(r["num_correct"]) / 8) for r in load_records(tmp_path / path)[::2]])
    assert f"{expected:.3f}" in none_row  # pass@1 recomputed from the counts
    assert "**reproduced**" in blocks["nsr:claims"] and "0.049 (paper)" in blocks["nsr:claims"]
    assert "trl-rlvr-ext study x --arms none   # 3 runs" in blocks["nsr:commands"]
    assert render_study("nsr", tmp_path)[0] == blocks  # deterministic: a fixed bootstrap seed

    _write(tmp_path, path, _nsr_records(rng, effect_problems=0, num_problems=400))
    (judgement,) = [p.judgement for p in render_study("nsr", tmp_path)[1]]
    assert judgement.verdict == "no test" and (judgement.low, judgement.high) == (0.0, 0.0)
    assert "identical on every seed and problem" in render_study("nsr", tmp_path)[0]["nsr:claims"]


def test_trivial_baselines_are_rows_and_a_baseline_and_their_absence_is_handled(tmp_path):
    study = get_study("self")
    setting = PAGES["self"].settings[0]
    sizes = {**setting.match, "num_prompts": 4, "steps_per_generation": 2}
    records = [_record("base", s, [8] * 40 + [0] * 10, num_samples=256, sizes=sizes) for s in range(3)]
    records += [_record("grpo", s, [8] * 40 + [0] * 10, num_samples=256, sizes=sizes) for s in range(3)]
    _write(tmp_path, setting.records[0], records)
    _write_others_empty(tmp_path, "self")

    parts = judge_parts("self", study, setting, setting_records(study, setting, tmp_path))
    (trivial,) = [p for p in parts if p.claim.baseline == "trivial*"]
    assert trivial.judgement is None and trivial.not_judged == "no trivial records"
    assert not any(
        "trivial" in line for line in render_study("self", tmp_path)[0]["self:main:toy:pass_at_k"].split("\n")[2:]
    )

    # one trivial record (it does not train): a row of the table, and the baseline of claim 0 for every seed
    _write(tmp_path, TRIVIAL_RECORDS, [_record("trivial_shuffle", 0, [1] * 50, num_samples=256)])
    blocks, parts = render_study("self", tmp_path)
    assert any(line.startswith("| trivial_shuffle | 0 |") for line in blocks["self:main:toy:pass_at_k"].splitlines())
    (trivial,) = [p for p in parts if p.claim.baseline == "trivial*" and p.setting.name == "main"]
    assert trivial.baseline == "trivial_shuffle" and trivial.judgement.num_seeds == 3
    # pass@256: the base solves 40 of 50 problems, the trivial policy (1 correct sample of 256) all 50: opposite
    assert trivial.judgement.verdict == "reversed" and trivial.judgement.effect < 0


def test_fill_replaces_blocks_keeps_prose_and_indentation_and_rejects_unknown_blocks():
    text = (
        "prose 1.0\n<!-- rendered: a -->\nold\n<!-- end rendered -->\n"
        '!!! info "x"\n    <!-- rendered: b -->\n    old\n    <!-- end rendered -->\ntail\n'
    )
    out = fill(text, {"a": "| t |\n\n| u |", "b": "line 1\n\nline 2"})
    assert out == (
        "prose 1.0\n<!-- rendered: a -->\n| t |\n\n| u |\n<!-- end rendered -->\n"
        '!!! info "x"\n    <!-- rendered: b -->\n    line 1\n\n    line 2\n    <!-- end rendered -->\ntail\n'
    )
    assert fill(out, {"a": "| t |\n\n| u |", "b": "line 1\n\nline 2"}) == out
    with pytest.raises(ValueError, match="no rendered block 'b'"):
        fill(text, {"a": "x"})
    # a page's own block that no marker places (the index once lost its verdict table this way) is refused
    with pytest.raises(ValueError, match=r"place these rendered blocks: \['verdicts'\]"):
        fill(text, {"a": "x", "b": "y", "verdicts": "z"})
    # a marker opened but closed the wrong way would stay empty: refused
    with pytest.raises(ValueError, match=r"close the rendered blocks \['c'\] with a line `<!-- end rendered -->`"):
        fill(text + "<!-- rendered: c -->\n<!-- /rendered -->\n", {"a": "x", "b": "y", "c": "z"})


def test_study_report_cli_checks_without_writing(tmp_path, capsys):
    from lab.scripts.study import cli_main

    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    # a detail page (the per-setting tables) and the forest plot are checked like the page itself
    detail, figure = "docs/evidence/nsr/results.md", tmp_path / "docs/evidence/nsr/forest.svg"
    assert detail in PAGES["nsr"].details
    page = tmp_path / detail
    page.write_text(page.read_text().replace("| none | 0,1,2 |", "| none | 0,1 |", 1))
    svg = figure.read_text()
    figure.write_text(svg.replace("</svg>", "<!-- edited --></svg>"))
    argv = ["report", "nsr", "--root", str(tmp_path)]
    assert cli_main([*argv, "--check"]) == 1
    out = capsys.readouterr().out
    assert (
        f"differs from its records: {detail}" in out
        and "differs from its records: docs/evidence/nsr/forest.svg" in out
    )
    assert "| none | 0,1 |" in page.read_text()  # --check wrote nothing
    assert cli_main(argv) == 0
    assert f"rendered: {detail}" in capsys.readouterr().out
    assert figure.read_text() == svg
    assert "| none | 0,1 |" not in page.read_text() and "| none | 0,1,2 |" in page.read_text()


def test_the_pages_show_the_held_out_composition_the_audit_found():
    """The splits block renders each reasoning-gym task's strata from its dataset name: chain_sum's evaluated problems
    are 99 % three-term against 50 % in train, 55 of them reorderings of a train problem; the mixture's are 67 %
    number_sorting against 48 % in train (the issue's audit, recomputed)."""
    from lab.studies.report import render_study

    blocks, _ = render_study("self", ROOT)
    splits = blocks["self:splits"]
    assert "| chain_sum num_digits=1 num_terms=3 | 996 (50 %) | 298 (99 %) | 99 (99 %) |" in splits
    assert "55 are a reordering of a train problem (55 with the same answer)" in splits
    assert "| number_sorting numbers=3 | 960 (48 %) | 203 (68 %) | 67 (67 %) |" in splits
    assert "Pass@k per stratum, setting `main`" in splits


def test_boundary_per_problem_counts_lost_and_gained_against_the_same_seed_base():
    from lab.studies.report import PAGES
    from lab.studies.self_study.pages import boundary_block

    page, setting = PAGES["self"], PAGES["self"].settings[0]
    sizes = dict(setting.match)
    base = [{"arm": "base", "seed": s, "num_correct": [3, 1, 0, 0], "num_samples": 4} for s in (0, 1)]
    grpo = [{"arm": "grpo", "seed": 0, "num_correct": [0, 2, 1, 4], "num_samples": 4, "sizes": sizes}]
    grpo += [{"arm": "grpo", "seed": 1, "num_correct": [1, 1, 0, 0], "num_samples": 4, "sizes": sizes}]
    table = boundary_block(page, setting, "toy", base + grpo)["boundary"]
    # seed 0 lost problem 0 and gained problems 2 and 3; seed 1 lost and gained nothing: net (1 + 0) / 2 / 4 problems
    assert "| grpo | 0,1 | 1 / 0 | 2 / 0 | +0.125 [" in table


def test_the_budget_table_counts_updates_prompts_and_the_k_below_the_base():
    from lab.studies.self_study.pages import budget_block

    page, setting = PAGES["self"], PAGES["self"].settings[0]
    sizes = {**dict(setting.match), "num_prompts": 4, "steps_per_generation": 2}

    def run(arm, seed, pass_at_k, log=()):
        # the run's own max_steps (10) is its GRPO config's, as when an arm stops early
        config = {"max_steps": 10}
        return {
            "arm": arm,
            "seed": seed,
            "sizes": sizes,
            "grpo_config": config,
            "pass_at_k": pass_at_k,
            "train_log": list(log),
        }

    base = [run("base", s, {"1": 0.5, "4": 0.8}) for s in (0, 1)]
    # grpo: 10 updates and 5 batches x 4 prompts = 20 prompts per seed; mean pass@1 gap (+0.1 - 0.2) / 2 < 0, pass@4 0
    grpo = [run("grpo", 0, {"1": 0.6, "4": 0.8}), run("grpo", 1, {"1": 0.3, "4": 0.8})]
    # self seed 0: 3 steps skipped; kept prompts 2 per batch over steps 0-4 (2 batches), 1 over steps 4-10 (3): 7
    log = [{"step": 4, "curation/kept_prompts": 2.0}, {"step": 10, "curation/kept_prompts": 1.0}]
    log += [{"step": 10, "curation/skipped_steps": 3}]
    selfs = [run("self", 0, {"1": 0.4, "4": 0.7}, log), run("self", 1, {"1": 0.4, "4": 0.7})]
    table = budget_block(page, setting, base + grpo + selfs)["budget"]
    assert "| grpo | 0,1 | 10 / 10 | 10 | 20 / 20 | 1 |" in table
    assert "| self | 0,1 | 7 / 10 | 10 | 7 / 20 | every k |" in table
    # an arm with one seed has no mean to compare, and no trained arm means no block
    assert "| self |" not in budget_block(page, setting, base + selfs[:1]).get("budget", "")
    assert budget_block(page, setting, base) == {}


def test_clipped_ratio_histograms_sum_the_logged_counts_per_side():
    from lab.studies.nsr_study.pages import clipped_ratio_block
    from lab.studies.report import PAGES

    page, setting = PAGES["nsr"], PAGES["nsr"].settings[0]
    sizes = dict(setting.match)

    def log(low, high):
        return {
            **{f"off_policy/clipped_low_hist{k}": v for k, v in enumerate(low)},
            **{f"off_policy/clipped_high_hist{k}": v for k, v in enumerate(high)},
        }

    runs = [
        # a fresh step (nothing clipped) and a replayed one; two seeds: the counts add up over steps and seeds
        {
            "arm": "none",
            "seed": 3,
            "sizes": sizes,
            "train_log": [log([0] * 5, [0] * 5), log([1, 0, 0, 1, 2], [4, 0, 0, 0, 0])],
        },
        {"arm": "none", "seed": 4, "sizes": sizes, "train_log": [log([0, 0, 0, 0, 4], [0, 4, 0, 0, 0])]},
        {"arm": "cispo", "seed": 3, "sizes": sizes, "train_log": [{"loss": 0.1}]},  # no diagnostics: no row
    ]
    text = clipped_ratio_block(page, setting, "toy", runs)["clipped_ratios"]
    assert "| none (8 tokens, seeds 3,4) | 0.12 | 0.00 | 0.00 | 0.12 | 0.75 |" in text
    assert "| none (8 tokens, seeds 3,4) | 0.50 | 0.50 | 0.00 | 0.00 | 0.00 |" in text
    assert "cispo" not in text and "[0.9, 1)" in text and "[2, inf)" in text
    assert clipped_ratio_block(page, setting, "toy", runs[2:]) == {}  # no run logs them: no block


def test_stability_applies_the_margin_to_every_seed_of_every_rate():
    from lab.studies.lora_init_study import STABLE_MARGIN, stable
    from lab.studies.lora_init_study.pages import stability_block
    from lab.studies.report import PAGES

    assert STABLE_MARGIN == 0.05
    assert stable({"pass_at_k": {"1": 0.36}}, 0.40) and not stable({"pass_at_k": {"1": 0.34}}, 0.40)
    page, setting = PAGES["lora_init"], PAGES["lora_init"].settings[0]
    log = [{"reward": 0.5}]
    records = [{"arm": "base", "seed": s, "pass_at_k": {"1": v}} for s, v in ((0, 0.38), (1, 0.42))]  # mean 0.40
    records += [
        {"arm": "lora@5e-4", "seed": s, "pass_at_k": {"1": v}, "train_log": log} for s, v in ((0, 0.45), (1, 0.30))
    ]
    records += [{"arm": "rlmo@5e-4", "seed": 0, "pass_at_k": {"1": 0.36}, "train_log": log}]
    table = stability_block(page, setting, "number_sorting", records)["stability"]
    assert "| lora@5e-4 | 0,1 | 0.450 / 0.300 | +0.100 | **no** |" in table  # one seed past the margin fails it
    assert "| rlmo@5e-4 | 0 | 0.360 | +0.040 | yes |" in table and "Base pass@1: 0.400" in table


def test_an_untrained_record_belongs_only_where_it_measured_the_trained_runs_problems(tmp_path):
    """A validation sweep's base (held-out rows 100-199) is not a row of the test problems' table, and the test
    problems' base and trivial policies are not rows of a validation sweep's table."""
    from lab.studies.report import evaluation_rows

    study = get_study("self")
    setting = PAGES["self"].settings[0]
    sizes = setting.match
    validation = {"evaluated_on": {"name": "validation", "split": "test", "rows": [50, 100], "problems": 50}}
    records = [_record("base", 0, [8] * 50, num_samples=256, sizes=sizes)]
    records += [_record("base", 1, [0] * 50, num_samples=256, sizes=sizes, **validation)]
    records += [_record("grpo", 0, [8] * 50, num_samples=256, sizes=sizes)]
    _write(tmp_path, setting.records[0], records)
    _write(tmp_path, TRIVIAL_RECORDS, [_record("trivial_shuffle", 0, [1] * 50, num_samples=256)])
    assert evaluation_rows(records[0]) == (0, 50) and evaluation_rows(records[1]) == (50, 100)
    kept = setting_records(study, setting, tmp_path)
    assert sorted((r["arm"], r["seed"]) for r in kept) == [("base", 0), ("grpo", 0), ("trivial_shuffle", 0)]

    # a setting whose trained runs measured the validation rows keeps only the base that measured them too
    for r in records[2:]:
        r.update(validation)
    _write(tmp_path, setting.records[0], records)
    kept = setting_records(study, setting, tmp_path)
    assert sorted((r["arm"], r["seed"]) for r in kept) == [("base", 1), ("grpo", 0)]


def test_a_task_that_ran_only_its_base_is_shown_with_its_trivial_policies(tmp_path):
    """A base evaluated for another study's task (no trained arm in the setting) is a row where its sizes are the
    setting's, with the trivial policies graded on the same problems; a base of other sizes is not."""
    study = get_study("self")
    setting = PAGES["self"].settings[0]
    records = [_record("base", 0, [8] * 50, task="countdown", num_samples=256, sizes=setting.match)]
    records += [_record("base", 0, [8] * 50, task="chain_sum", num_samples=256, sizes={"max_steps": 7})]
    _write(tmp_path, setting.records[0], records)
    _write(tmp_path, TRIVIAL_RECORDS, [_record("trivial_random_expression", 0, [1] * 50, task="countdown")])
    kept = setting_records(study, setting, tmp_path)
    assert sorted((r["task"], r["arm"]) for r in kept) == [
        ("countdown", "base"),
        ("countdown", "trivial_random_expression"),
    ]


def test_the_seed_table_leaves_out_trivial_policies_beside_trained_runs():
    from lab.studies.report import PAGES, seeds_table

    page = PAGES["nsr"]
    runs = [_record("none", seed, [1] * 25 + [0] * 25, num_samples=64) for seed in (10, 11)]
    trivial = [_record("trivial_random_expression", seed, [2] * 25 + [0] * 25, num_samples=64) for seed in (0, 1, 2)]
    table = seeds_table(page, runs + trivial)
    # only the training seeds are columns, and the guess seeds' rows are not paired with them
    assert table.splitlines()[0] == "| arm | seed 10: pass@1 / pass@64 | seed 11: pass@1 / pass@64 |"
    assert "trivial" not in table and "| none | 0.008 / 0.500 | 0.008 / 0.500 |" in table
    assert "| trivial_random_expression | 0.016 / 0.500 | 0.016 / 0.500 | 0.016 / 0.500 |" in seeds_table(
        page, trivial
    )


def test_a_boundary_claim_counts_only_where_its_prerequisite_is_reproduced(tmp_path):
    """Claim 1a (GRPO lowers pass@256) requires claim 0 (the base above the trivial policy at pass@256) on the same
    task: on a task where the trivial policy reaches the base, its part is shown, with its interval, and not counted."""
    study = get_study("self")
    setting = PAGES["self"].settings[0]
    sizes = setting.match
    records = []
    for task, trivial_correct in (("toy", 0), ("chain_sum", 1)):
        # the base solves 40 of 50 problems in some sample, GRPO loses 10 of them (a shrink of 0.2 at pass@256)
        records += [_record("base", s, [8] * 40 + [0] * 10, task=task, num_samples=256, sizes=sizes) for s in range(3)]
        records += [_record("grpo", s, [8] * 30 + [0] * 20, task=task, num_samples=256, sizes=sizes) for s in range(3)]
        # a trivial policy that never solves (toy: claim 0 reproduced) or solves every problem at large k
        records.append(_record("trivial_x", 0, [trivial_correct] * 50, task=task, num_samples=256))
    _write(tmp_path, setting.records[0], [r for r in records if not r["arm"].startswith("trivial")])
    _write(tmp_path, TRIVIAL_RECORDS, [r for r in records if r["arm"].startswith("trivial")])
    parts = apply_requirements(judge_parts("self", study, setting, setting_records(study, setting, tmp_path)))
    shrink = {p.task: p for p in parts if p.claim.name.startswith("1a.")}
    prerequisite = {p.task: p.judgement.verdict for p in parts if p.claim.name.startswith("0.")}
    assert prerequisite == {"toy": "reproduced", "chain_sum": "reversed"}  # the trivial policy above the base
    assert shrink["toy"].excluded == "" and shrink["chain_sum"].excluded == "claim 0 not reproduced on"
    assert {p.judgement.verdict for p in shrink.values()} == {"reproduced"}  # both judged, one counted
    assert group_verdict(list(shrink.values())) == "**reproduced**"
    assert group_verdict([shrink["chain_sum"]]) == "**no test** (claim 0 not reproduced on chain_sum)"
    # claims without a requirement are untouched
    assert all(not p.excluded for p in parts if not p.claim.requires)


def test_comparisons_leave_out_the_near_duplicates_of_train_problems(tmp_path, monkeypatch):
    """`judged_problems` keeps the held-out problems that are not a reordering of a train problem; the pairing then
    judges only those (a difference confined to the near duplicates disappears), and the claims table says so."""
    from lab.studies import judging, report

    flags = (True, False) * 10
    monkeypatch.setattr(judging, "_near_duplicate_flags", lambda dataset, start, stop: flags[start:stop])
    monkeypatch.setattr(report, "splits_blocks", lambda settings_records: {})  # no real dataset behind the name
    dataset = "reasoning_gym:x"
    records = [
        _record(arm, s, counts, sizes=NSR_SIZES, dataset=dataset)
        for s in range(3)
        for arm, counts in (("none", [4] * 20), ("nsr", [8, 4] * 10))  # nsr better only on the near duplicates
    ]
    assert judged_problems(records, "toy").tolist() == [not f for f in flags]
    # the blocks that read the counts themselves get them cut the same way; the records stay as they are
    cut = report.judged_records(records)
    assert cut[1]["num_correct"] == [4] * 10 and records[1]["num_correct"] == [8, 4] * 10
    # another task, records of other problems, or a non-reasoning-gym dataset: nothing is left out
    assert judged_problems(records, "other") is None
    assert judged_problems([{**r, "dataset": "toy:arithmetic"} for r in records], "toy") is None
    _write(tmp_path, PAGES["nsr"].settings[0].records[0], records)
    for other in PAGES["nsr"].settings[1:]:
        _write(tmp_path, other.records[0], [])
    blocks, (part,) = render_study("nsr", tmp_path)
    assert part.judgement.num_problems == 10 and part.near_duplicates == 10 and part.judgement.effect == 0
    assert "left out: toy 10" in blocks["nsr:claims"] and "| toy, `lr3e-4` (3 × 10) |" in blocks["nsr:claims"]


def test_a_setting_can_be_exploratory_on_some_tasks_only():
    """NSR's lr 3e-4 regime was chosen on chain_sum's and number_sorting's runs: exploratory there, counted elsewhere."""
    from lab.studies.report import Part

    setting = next(s for s in PAGES["nsr"].settings if s.name == "lr3e-4")
    claim = get_study("nsr").claims[0]
    reasons = {task: Part("nsr", claim, setting, task, "none", None).exploratory for task in ("toy", "chain_sum")}
    assert reasons["toy"] == "" and reasons["chain_sum"].startswith("chosen after looking: ")
    assert set(setting.exploratory_tasks) == {"chain_sum", "number_sorting"}


def test_comparisons_that_read_a_base_chosen_on_the_test_set_are_exploratory(tmp_path):
    """number_sorting's base in use was chosen on the test problems (the base-steps calibration chooses other steps):
    a part that reads that base's own results (GRPO against the base) is exploratory; a part between two trained arms
    on it is not; the same claim on another base counts."""
    from lab.studies.base_steps import DIGEST_IN_USE

    study = get_study("self")
    setting = PAGES["self"].settings[0]
    sizes = {**setting.match, "num_prompts": 4, "steps_per_generation": 2}
    records = []
    for task in ("number_sorting", "chain_sum"):
        base_model = f"/cache/reasoning_gym/{DIGEST_IN_USE[task]}"
        for arm, counts in (("base", [2] * 30), ("grpo", [6] * 30), ("pass_rate", [6] * 30)):
            records += [
                _record(arm, s, counts, task=task, num_samples=8, sizes=sizes, base_model=base_model) for s in range(3)
            ]
    _write(tmp_path, setting.records[0], records)
    parts = judge_parts("self", study, setting, setting_records(study, setting, tmp_path))
    by = {(p.claim.arm, p.baseline, p.task): p for p in parts}
    assert by["grpo", "base", "number_sorting"].exploratory.startswith("base chosen on the test set: number_sorting")
    assert by["pass_rate", "grpo", "number_sorting"].exploratory == ""
    assert by["grpo", "base", "chain_sum"].exploratory == ""
    _write_others_empty(tmp_path, "self")
    table = render_study("self", tmp_path)[0]["self:claims"]
    assert "On number_sorting the comparisons that read the base's own test results are exploratory" in table


def test_trivial_policies_pair_with_the_arms_seeds_in_order_and_requirements_read_the_parts_own_setting():
    """A trivial policy's seeds only resample its guesses: base seeds 20-22 pair with its seeds 0-2. A setting on
    another base judges claim 0 itself, and its boundary parts read that verdict, not another setting's."""
    from lab.studies.report import Part
    from lab.studies.verdicts import Judgement

    study = get_study("self")
    main, other = PAGES["self"].settings[0], PAGES["self"].settings[-1]
    assert other.name == "validated_number_sorting"
    records = [_record("base", s, [8] * 50, num_samples=256, sizes=main.match) for s in (20, 21, 22)]
    records += [_record("trivial_x", s, [0] * 50, num_samples=256) for s in (0, 1, 2)]
    parts = judge_parts("self", study, other, records)
    (claim0,) = [p for p in parts if p.claim.baseline == "trivial*"]
    assert claim0.judgement.num_seeds == 3 and claim0.judgement.verdict == "reproduced"

    def part(claim, setting, verdict):
        judgement = Judgement(claim, 0.1, 0.05, 0.15, 0.01, 3, 50, verdict)
        return Part("self", claim, setting, "number_sorting", claim.baseline, judgement)

    zero, shrink = study.claims[0], study.claims[1]
    assert shrink.requires == zero.name
    gated = apply_requirements(
        [part(zero, main, "not reproduced"), part(zero, other, "reproduced"), part(shrink, main, "reproduced")]
        + [part(shrink, other, "reproduced")]
    )
    assert [p.excluded for p in gated[2:]] == ["claim 0 not reproduced on", ""]


def test_trivial_policies_repeat_their_seeds_where_a_setting_declares_more_seeds_than_they_have():
    """Three trivial seeds against five declared seeds: in a setting that declares its seeds (and judges every one) the
    policy's seeds repeat in order, 0, 1, 2, 0, 1; elsewhere the pairs stop at the shorter list, as before."""
    from lab.studies.judging import _paired_trivial

    arm = {s: f"arm{s}" for s in (10, 11, 12, 13, 14)}
    trivial = {s: f"guess{s}" for s in (2, 0, 1)}
    assert _paired_trivial(arm, trivial, cycle=True) == {
        10: "guess0",
        11: "guess1",
        12: "guess2",
        13: "guess0",
        14: "guess1",
    }
    assert _paired_trivial(arm, trivial, cycle=False) == {10: "guess0", 11: "guess1", 12: "guess2"}
    assert _paired_trivial(arm, {7: "one"}, cycle=False) == dict.fromkeys(arm, "one")  # one record: every seed
    # the pretrained page declares seeds 10-14: its claim 10 is judged on all five of the base's seeds
    study = get_study("pretrained")
    setting = PAGES["pretrained"].settings[0]
    assert setting.seeds == (10, 11, 12, 13, 14)
    records = [_record("base", s, [8] * 50, "products", num_samples=32) for s in setting.seeds]
    records += [_record("trivial_x", s, [0] * 50, "products", num_samples=32) for s in (0, 1, 2)]
    (claim10,) = [p for p in judge_parts("pretrained", study, setting, records) if p.claim.baseline == "trivial*"]
    assert claim10.judgement.num_seeds == 5 and claim10.judgement.verdict == "reproduced"


def test_seed_ranges_by_hand():
    from lab.studies.report import seed_ranges

    assert seed_ranges([4, 0, 1, 2, 3, 7]) == "0-4,7"
    assert seed_ranges([20, 21]) == "20,21" and seed_ranges([0, 2, 3, 4]) == "0,2-4" and seed_ranges([]) == ""


def test_mean_sd_by_hand():
    """The one "mean ± sd" cell of every table: None always left out, NaN left out unless kept, a sign on request."""
    from lab.studies.markdown import mean_sd

    assert mean_sd([0.5, None, 0.7]) == "0.600 ± 0.141"
    assert mean_sd([0.5, float("nan")]) == "0.500"
    assert mean_sd([0.5, float("nan")], keep_nan=True) == "nan" and mean_sd([float("nan")], keep_nan=True) == "nan"
    assert mean_sd([None, float("nan")]) == "n/a" and mean_sd([]) == "n/a"
    assert mean_sd([1.0, 3.0], digits=0) == "2 ± 1"
    assert mean_sd([0.25], signed=True) == "+0.250" and mean_sd([-0.1, -0.3], signed=True) == "-0.200 ± 0.141"


def _gated_setup(clip_arm: float, clip_base: float):
    """Three seeds of a claim gated on the clipped share (the real-model NSR claim's gate), arm well above its
    baseline, with the given share of clipped tokens logged by each arm's runs."""
    from lab.studies.verdicts import Claim, Gate

    gate = Gate("clipped share", lambda r: r["train_log"][0]["clip"] if r["train_log"] else None, 0.05, "a test")
    claim = Claim("g. gated", "nsr", "none", "pass@1", paper_effect=0.049, mechanism=gate)
    records = []
    for s in range(3):
        records.append(_record("none", s, [2] * 30 + [6] * 30, train_log=[{"clip": clip_base}]))
        records.append(_record("nsr", s, [6] * 60, train_log=[{"clip": clip_arm}]))
    return claim, records


def test_the_mechanism_gate_makes_a_part_no_test_where_its_mechanism_did_not_act():
    from lab.studies.judging import _gated
    from lab.studies.verdicts import judge

    claim, records = _gated_setup(clip_arm=0.07, clip_base=0.0063)
    arm = {r["seed"]: np.asarray(r["num_correct"]) / 8 for r in records if r["arm"] == "nsr"}
    base = {r["seed"]: np.asarray(r["num_correct"]) / 8 for r in records if r["arm"] == "none"}
    judgement = judge(claim, arm, base, num_resamples=500)
    assert judgement.verdict == "reproduced"
    gated = _gated(judgement, records, "toy", ("nsr", "none"), [0, 1, 2])
    assert (gated.verdict, gated.interval_verdict) == ("no test", "reproduced")
    assert gated.no_test == (
        "mechanism did not act: clipped share 0.0700 (nsr) and 0.0063 (none), under the 0.05 it needs"
    )
    # the gate holds (both at least the minimum, 0.05 itself included): the verdict stands (the gate must not fire)
    claim, records = _gated_setup(clip_arm=0.05, clip_base=0.08)
    assert _gated(judgement, records, "toy", ("nsr", "none"), [0, 1, 2]) is judgement
    # a run that logs no measure does not show the gate holds
    records = [dict(r, train_log=[]) for r in records]
    assert _gated(judgement, records, "toy", ("nsr", "none"), [0, 1, 2]).verdict == "no test"


def test_the_rule_changes_list_names_every_moved_part_old_new_and_why():
    import dataclasses as dc

    from lab.studies.judging import Part, verdict_text
    from lab.studies.verdict_index import design_rule_changes
    from lab.studies.verdicts import Claim, Judgement

    study, page = "nsr", PAGES["nsr"]
    setting = page.settings[0]
    claim = Claim("c. arm beats base", "arm", "base", "pass@1", paper_effect=0.05)

    def part(task, verdict, interval_verdict, no_test="", high=0.1, power=0.9):
        j = Judgement(claim, -0.1, -0.2, high, 0.05, 3, 50, verdict, interval_verdict=interval_verdict)
        return Part(study, claim, setting, task, "base", dc.replace(j, no_test=no_test, power=power))

    parts = [
        part("toy", "reversed", "not reproduced", high=-0.01),
        part(
            "countdown_compact", "no test", "not reproduced", no_test="no headroom: the baseline at pass = 1 on 100 %"
        ),
        part("countdown", "inconclusive", "inconclusive", power=0.2),
    ]
    text = design_rule_changes({study: parts}, PAGES)
    assert text.splitlines() == [
        (
            "- *c. arm beats base* ([nsr](nsr.md)): mixed (2 not reproduced, 1 inconclusive) → **mixed (1 reversed, 1 "
            "inconclusive) (1 part with no test: no headroom)**"
        ),
        f"    - toy, {setting.name}: not reproduced → reversed (the interval excludes 0 on the other side)",
        (
            f"    - countdown_compact, {setting.name}: not reproduced → no test (no headroom: the baseline at pass = 1 on "
            "100 %)"
        ),
    ]
    assert design_rule_changes({study: parts[2:]}, PAGES) == "- none"  # nothing moved: nothing listed
    assert verdict_text(parts[2].judgement) == "**inconclusive** (underpowered)"
    assert verdict_text(parts[0].judgement) == "**reversed**"


def test_a_declared_selection_on_the_test_problems_makes_a_claim_exploratory_and_lists_it():
    """`PageSetting.selected_on_test` (the real model's task chosen on the problems it is judged on): its parts are
    exploratory beside any earlier reason (labels joined), the claim's verdict says so, the v3 verdict did not, and
    the list of v4's changes names the claim; a page's own moved verdicts (``page_changes``) come last."""
    import dataclasses as dc

    from lab.studies.judging import Part, exploratory_label
    from lab.studies.verdict_index import design_rule_changes, group_verdict
    from lab.studies.verdicts import Claim, Judgement

    study = "nsr"
    setting = dc.replace(PAGES[study].settings[0], selected_on_test="task chosen on these problems: a screening")
    claim = Claim("c. arm beats base", "arm", "base", "pass@1", paper_effect=0.05)
    seen = dc.replace(claim, name="d. seen", exploratory="seen before: the table showed it")
    j = Judgement(claim, 0.01, -0.02, 0.04, 0.05, 3, 50, "inconclusive", interval_verdict="inconclusive")
    part = Part(study, claim, setting, "toy", "base", j)
    both = Part(study, seen, setting, "toy", "base", dc.replace(j, claim=seen))
    assert part.looked == "" and part.exploratory == setting.selected_on_test
    assert exploratory_label(both.exploratory) == "seen before, task chosen on these problems"
    assert group_verdict([part]) == "**inconclusive**, exploratory (task chosen on these problems)"
    assert group_verdict([part], v3=True) == "**inconclusive**"
    assert group_verdict([both], v3=True) == "**inconclusive**, exploratory (seen before)"
    moved = "- *x* ([self](self.md)), by prediction:\n    - m: not reproduced → reversed (why)"
    assert design_rule_changes({study: [part, both]}, PAGES, [moved]).splitlines() == [
        (
            "- *c. arm beats base* ([nsr](nsr.md)): inconclusive → **inconclusive**, exploratory (task chosen on "
            "these problems)"
        ),
        (
            "- *d. seen* ([nsr](nsr.md)): inconclusive, exploratory (seen before) → **inconclusive**, exploratory "
            "(seen before, task chosen on these problems)"
        ),
        *moved.splitlines(),
    ]
    # without the declaration nothing moved: nothing listed but the page's own
    plain = dc.replace(part, setting=PAGES[study].settings[0])
    assert design_rule_changes({study: [plain]}, PAGES) == "- none"
