"""`make bench-quick` (bench/quick.py) without running a benchmark: its summary lines format and parse back, the
targets table (bench/targets.py) is well formed and names only entries that run, every benchmark script has a
``--quick`` mode, and bench/real_model.py reports exactly the options the table gives it. No timing here: speed is
checked by the benchmarks, never by a test."""

import argparse
import math
import sys
from pathlib import Path

import pytest


BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import quick  # noqa: E402
from targets import TARGETS  # noqa: E402


# bench/*.py that are not benchmarks of their own, and why
NOT_RUN = {
    "quick.py": "the runner",
    "targets.py": "the targets table",
    "model_shapes.py": "a helper (model shapes)",
    "curation_real_model.py": "a part of bench/real_model.py (--parts curation)",
    "gpu_check.py": "the GPU check, run by bench/gpu_check.sh (--dry-run on a CPU)",
}


@pytest.mark.parametrize(
    "ratio, limit, line",
    [
        (1.0114, 1.03, "bench nsr: ratio 1.011 (target <= 1.03) ok"),
        (1.03, 1.03, "bench nsr: ratio 1.030 (target <= 1.03) ok"),
        (1.0884, 1.03, "bench nsr: ratio 1.088 (target <= 1.03) MISS"),
        (1.1, 1 + 1 / 8, "bench nsr: ratio 1.100 (target <= 1.125) ok"),
        (0.7, 2.0, "bench nsr: ratio 0.700 (target <= 2) ok"),
        (None, 1.03, "bench nsr: ratio - (target <= 1.03) MISS"),
        (math.nan, 1.03, "bench nsr: ratio - (target <= 1.03) MISS"),
        (math.inf, 1.03, "bench nsr: ratio - (target <= 1.03) MISS"),
    ],
)
def test_summary_line_formats_and_parses_back(ratio, limit, line):
    assert quick.summary_line("nsr", ratio, limit) == line
    parsed = quick.parse_summary_line(line)
    assert parsed["name"] == "nsr" and parsed["limit"] == pytest.approx(limit, abs=5e-4)
    assert parsed["ok"] is line.endswith(" ok")
    assert parsed["ratio"] == (None if " ratio - " in line else pytest.approx(ratio, abs=5e-4))


@pytest.mark.parametrize(
    "line",
    ["bench nsr: ratio 1.011 (target <= 1.03)", "bench nsr ratio 1.011 (target <= 1.03) ok", "quick-ratio nsr 1.0"],
)
def test_other_lines_are_not_summary_lines(line):
    assert quick.parse_summary_line(line) is None


def test_reports_are_read_back_from_a_benchmark_output(capsys):
    quick.report("delta", 1.08843217)
    quick.report("rsi", 0.99)
    out = "round 1/1: delta x1.070\n" + capsys.readouterr().out + "quick-ratio bad\nquick-ratio x 1.0 extra\n"
    assert out.count("quick-ratio delta 1.08843\n") == 1
    assert quick.parse_reports(out) == {"delta": 1.08843, "rsi": 0.99}


def test_quick_defaults_apply_only_with_quick_and_yield_to_explicit_options():
    def parse(argv):
        parser = argparse.ArgumentParser()
        parser.add_argument("--rounds", type=int, default=5)
        parser.add_argument("--steps", type=int, default=10)
        quick.quick_defaults(parser, argv, rounds=1, steps=4)
        return parser.parse_args(argv)

    assert vars(parse([])) == {"rounds": 5, "steps": 10, "quick": False}
    assert vars(parse(["--quick"])) == {"rounds": 1, "steps": 4, "quick": True}
    assert vars(parse(["--quick", "--steps", "6"])) == {"rounds": 1, "steps": 6, "quick": True}


def test_targets_table_is_well_formed():
    assert {"delta", "rsi", "nsr", "acpo", "poise", "popo", "is_dpo", "relex", "lora_init"} <= set(TARGETS)
    for name, target in TARGETS.items():
        assert quick.parse_summary_line(quick.summary_line(name, 1.0, target.limit)) is not None, name
        assert target.bench in quick.BENCHES, f"{name}: no entry {target.bench!r} in quick.BENCHES"
        assert math.isfinite(target.limit) and target.limit > 0, name
        assert target.measure.strip() and target.why.strip(), name
    # the 3 % on the real model: no real-model option has a looser target
    real = {name: t.limit for name, t in TARGETS.items() if t.bench.startswith("real_model:")}
    assert real and set(real.values()) == {1.03}


def test_every_benchmark_has_an_entry_with_a_quick_mode():
    scripts = {command[0] for command, _ in quick.BENCHES.values()}
    for command, budget in quick.BENCHES.values():
        assert "--quick" in command and 0 < budget <= quick.TOTAL_LIMIT_S, command
        text = (BENCH.parent / command[0]).read_text()
        quick_flags = ("quick_defaults(", "grpo_overhead.main(", "common_parser(", 'add_argument("--quick"')
        assert any(flag in text for flag in quick_flags), command[0]
    on_disk = {f"bench/{p.name}" for p in BENCH.glob("*.py")} - {f"bench/{name}" for name in NOT_RUN}
    assert on_disk == scripts, "a benchmark in bench/ without an entry in quick.BENCHES (or a stale entry)"


def test_summary_puts_one_line_per_option_last_and_fails_on_a_crash_or_a_miss():
    ok = {"seconds": 30.0, "cpu": 28.0, "status": "exit 0", "failed": False}
    results = {
        "real_model:grpo": {**ok, "ratios": {"nsr": 1.01, "delta": 1.09, "rsi": 1.0}},
        "poise": {"seconds": 12.0, "cpu": 6.0, "status": "exit 1", "failed": True, "ratios": {}},
    }
    lines, passed = quick.summarize(results, total_seconds=42.0)
    assert not passed
    option_lines = [line for line in lines if quick.parse_summary_line(line)]
    expected = [name for name, t in TARGETS.items() if t.bench in results]
    assert [quick.parse_summary_line(line)["name"] for line in option_lines] == expected
    assert lines[-len(option_lines) :] == option_lines  # last
    assert "bench delta: ratio 1.090 (target <= 1.03) MISS" in lines
    assert "bench nsr: ratio 1.010 (target <= 1.03) ok" in lines
    assert "bench poise: ratio - (target <= 1.12) MISS" in lines
    assert "bench acpo: ratio - (target <= 1.03) MISS" in lines  # not reported
    assert "poise: exit 1, 12 s, CPU 6 s" in lines and "total 42 s (limit 600 s) ok" in lines
    assert "CPU 34 s over all runs: on an idle 2-core machine, about 28 s at 2 jobs" in lines  # the longest run

    fine = {"real_model:grpo": {**ok, "ratios": dict.fromkeys(expected[:7], 1.0)}}
    lines, passed = quick.summarize(fine, total_seconds=100.0)
    assert passed, lines
    lines, passed = quick.summarize(fine, total_seconds=601.0)
    assert not passed and "total 601 s (limit 600 s) MISS" in lines


def test_real_model_reports_the_options_the_table_gives_it(capsys):
    import real_model

    speedups = {layer: {"rlpo (full SVD f32)": 1.25} for layer in real_model.LORA_LAYERS}
    results = {
        "grpo": {**dict.fromkeys(real_model.GRPO_ARMS[1:], 1.01), "delta": 1.05},
        "dpo": dict.fromkeys(real_model.DPO_ARMS, 1.0),
        "lora_init": speedups,
    }
    real_model.quick_summary(results)
    reported = quick.parse_reports(capsys.readouterr().out)
    assert set(reported) == {name for name, t in TARGETS.items() if t.bench.startswith("real_model:")}
    assert reported["lora_init"] == 0.8 and reported["delta"] == 1.05 and reported["diagnostics"] == 1.01


def test_an_exclusive_entry_runs_alone_and_last():
    assert set(quick.EXCLUSIVE) <= set(quick.BENCHES)
    order = quick.run_order(list(quick.BENCHES))
    assert order[-len(quick.EXCLUSIVE) :] == sorted(quick.EXCLUSIVE, key=lambda n: -quick.BENCHES[n][1])
    assert quick.next_to_start(["poise", "popo"], ["relex"], 2) == "poise"
    assert quick.next_to_start(["poise"], ["relex", "popo"], 2) is None  # both cores busy
    assert quick.next_to_start(["reward_timeout"], ["relex"], 2) is None  # waits for an empty machine
    assert quick.next_to_start(["reward_timeout"], [], 2) == "reward_timeout"
    assert quick.next_to_start(["poise"], ["reward_timeout"], 2) is None  # nothing beside it
    assert quick.next_to_start([], [], 2) is None
