"""The prepared GPU check (bench/gpu_check.sh): its CPU dry run, its refusal without CUDA, and its report format."""

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402


SUBSECTIONS = [
    "### GRPO with NSR against stock `GRPOTrainer`",
    "### IS-DPO against stock `DPOTrainer`",
    "### LoRA initialisers (`bench/lora_init.py`)",
    "### DeepSpeed ZeRO-3, one process (`trl_rlvr_ext.lora_init`)",
]


def run_script(*args, env_extra=None, timeout=600):
    env = {key: value for key, value in os.environ.items() if key != "OUT"}
    env.update({"PYTHON": sys.executable, "OMP_NUM_THREADS": "1", **(env_extra or {})})
    return subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def sections_of(text: str) -> dict[str, list[str]]:
    """The lines under each `###` heading."""
    sections, current = {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            current = line
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line)
    return sections


def table_rows(lines: list[str]) -> list[list[str]]:
    """The body rows of the first markdown table in ``lines`` (after checking its header and separator agree)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    header, separator = lines[start], lines[start + 1]
    width = header.count("|") - 1
    assert re.fullmatch(r"\|(---\|)+", separator) and separator.count("|") - 1 == width, (header, separator)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == width, line
        rows.append(cells)
    return rows


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check_out")
    result = run_script("--dry-run", env_extra={"OUT": str(out), "GPU_CHECK_BUDGET": "300"})
    return result, out / "gpu_results.md"


def test_dry_run_succeeds_and_writes_to_out(dry_run):
    result, path = dry_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert path.is_file(), "with OUT set, the results go to $OUT/gpu_results.md"
    assert "failed parts: none" in result.stdout


def test_dry_run_results_format(dry_run):
    _, path = dry_run
    text = path.read_text()
    lines = text.splitlines()
    # One `##` section that bench/RESULTS.md takes as is: its title first, every other heading one level down.
    assert lines[0] == gpu_check.SECTION_TITLE == "## GPU check (`bench/gpu_check.sh`)"
    assert [line for line in lines if line.startswith("#")] == [gpu_check.SECTION_TITLE, *SUBSECTIONS]
    assert gpu_check.DRY_RUN_NOTE in text
    # The header line: date, the GPU (none here), torch and trl versions.
    assert re.search(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC, GPU: none \(CPU", text, re.MULTILINE)
    assert f"torch {torch.__version__}" in text and re.search(r"trl \d+\.\d+", text)
    sections = sections_of(text)

    grpo = table_rows(sections[SUBSECTIONS[0]])
    assert [row[0] for row in grpo] == ['`clip_recovery="nsr"`', '`clip_recovery="nsr_expected"`']
    for row in grpo:
        assert all(float(cell) > 0 for cell in row[1:]), row

    dpo = table_rows(sections[SUBSECTIONS[1]])
    assert len(dpo) == 3 and dpo[0][0] == "stock `DPOTrainer`" and dpo[0][2] == "1.000"
    assert all(float(row[1]) > 0 and float(row[2]) > 0 for row in dpo)

    lora = table_rows(sections[SUBSECTIONS[2]])
    assert [row[0] for row in lora] == ["64×64", "48×96"]
    for row in lora:
        assert re.fullmatch(r"[\d.]+ s", row[2]) and re.fullmatch(r"[\d.]+× / [\d.e+-]+", row[3]), row

    zero3 = sections[SUBSECTIONS[3]]
    assert len(zero3) == 1 and zero3[0].startswith("skipped: ")
    try:
        import deepspeed  # noqa: F401

        assert "needs a CUDA device" in zero3[0]
    except ImportError:
        assert zero3[0].startswith("skipped: deepspeed not available (")


def test_real_mode_refuses_without_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the real check would run")
    result = run_script("--out", str(tmp_path / "r.md"), timeout=120)
    assert result.returncode == 2
    assert "needs a CUDA GPU" in result.stderr and "--dry-run" in result.stderr
    assert not (tmp_path / "r.md").exists()
    # The Python side refuses too, when run directly.
    assert gpu_check.main(["--out", str(tmp_path / "r.md")]) == 2
    assert not (tmp_path / "r.md").exists()


def test_failed_part_is_reported_and_the_next_part_runs(tmp_path, monkeypatch, capsys):
    def boom(cfg, ctx, deadline):
        raise RuntimeError("boom")

    monkeypatch.setattr(gpu_check, "part_lora_init", boom)
    out = tmp_path / "r.md"
    assert gpu_check.main(["--dry-run", "--parts", "lora_init,zero3", "--out", str(out)]) == 1
    sections = sections_of(out.read_text())
    assert sections[SUBSECTIONS[0]] == ["not run (not selected with --parts)."]
    assert sections[SUBSECTIONS[2]] == ["failed: RuntimeError: boom"]
    assert sections[SUBSECTIONS[3]][0].startswith("skipped: ")


def test_spent_budget_leaves_parts_not_run(tmp_path):
    out = tmp_path / "r.md"
    assert gpu_check.main(["--dry-run", "--budget", "0", "--out", str(out)]) == 1
    sections = sections_of(out.read_text())
    assert all(sections[title] == ["not run: the time budget was spent before this part."] for title in SUBSECTIONS)


def _fake_wheel(directory: Path, name: str, requirements: list[str]) -> None:
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requirements)
    with zipfile.ZipFile(directory / f"{name}-1.0-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{name}-1.0.dist-info/METADATA", metadata)


def test_carried_wheel_problems(tmp_path):
    _fake_wheel(
        tmp_path,
        "carried",
        [
            "torch>=1.0",  # met
            "torch>=9999",  # not met: found the installed version
            "surely-not-installed-package-xyz",  # not installed
            'other-missing-package-xyz; extra == "dev"',  # an extra's requirement: ignored
            'third-missing-package-xyz; python_version < "3"',  # another Python's: ignored
        ],
    )
    problems = gpu_check.carried_wheel_problems(tmp_path)
    assert problems == [
        f"carried-1.0-py3-none-any.whl needs torch>=9999: found {gpu_check.version_of('torch')}",
        "carried-1.0-py3-none-any.whl needs surely-not-installed-package-xyz: not installed",
    ]


def test_wheel_folder_is_git_ignored():
    result = subprocess.run(
        ["git", "check-ignore", "-q", ".whl/trl-1.16.0-py3-none-any.whl"], cwd=ROOT, check=False, capture_output=True
    )
    if result.returncode == 128:
        pytest.skip("not a git checkout")
    assert result.returncode == 0, ".whl/ must be git-ignored (it is carried explicitly, never committed)"


def test_bench_defaults_unchanged(tiny_model_path, tmp_path):
    """The new options keep the recorded CPU runs' settings when left at their defaults."""
    import dpo_overhead
    import grpo_overhead
    from trl import GRPOConfig

    trainer = grpo_overhead.make_trainer("stock", tiny_model_path, 1, str(tmp_path / "grpo"))
    args = trainer.args
    assert args.use_cpu and args.per_device_train_batch_size == 32 and args.num_generations == 8
    assert args.max_completion_length == 16 and args.num_iterations == 2 and args.model_init_kwargs is None
    assert args.bf16 == GRPOConfig(output_dir=str(tmp_path / "x"), use_cpu=True).bf16
    trainer, _ = dpo_overhead.build("stock", tiny_model_path, 4, str(tmp_path / "dpo"))
    args = trainer.args
    assert args.use_cpu and args.bf16 is False and args.max_length == 32 and args.model_init_kwargs is None


def test_zero3_part_report(monkeypatch, tmp_path):
    """The ZeRO-3 part's report from its two child runs (faked here: they need deepspeed and CUDA)."""
    runs = {
        "init": {
            "deepspeed": "0.19.8",
            "partitioned": True,
            "methods": {
                "rlpo": {"plain_seconds": 1.5, "zero3_seconds": 2.25, "max_abs_diff": 0.0, "compared": 216},
                "pissa": {"plain_seconds": 3.0, "zero3_seconds": 4.5, "max_abs_diff": 0.0, "compared": 216},
            },
        },
        "train": {"error": "RuntimeError: boom", "zero_stage": 3},
    }
    calls = []

    def fake_child(stage, cfg, ctx, site, timeout):
        calls.append((stage, site))
        return runs[stage]

    monkeypatch.setattr(gpu_check, "deepspeed_site", lambda: ("", "deepspeed 0.19.8 was installed"))
    monkeypatch.setattr(gpu_check, "run_zero3_child", fake_child)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    ctx = {"dry_run": False, "tmp": str(tmp_path), "model_path": "m", "deadline": float("inf")}
    outcome = gpu_check.part_zero3(gpu_check.SETTINGS["real"]["zero3"], ctx, float("inf"))
    assert calls == [("init", ""), ("train", "")]
    assert outcome["failed"]
    lines = outcome["lines"]
    assert lines[0].startswith("DeepSpeed: deepspeed 0.19.8 was installed. One process, `accelerate launch")
    assert table_rows(lines) == [
        ["`rlpo`", "1.50", "2.25", "0.00e+00", "216"],
        ["`pissa`", "3.00", "4.50", "0.00e+00", "216"],
    ]
    assert lines[-1] == "train: failed: RuntimeError: boom"


def test_zero3_part_skips_without_deepspeed_sdist(monkeypatch, tmp_path):
    """With CUDA but neither deepspeed nor a carried sdist, the part says plainly that it was skipped and why."""
    monkeypatch.setattr(gpu_check, "deepspeed_site", lambda: (None, "`import deepspeed` failed (X)"))
    monkeypatch.setattr(gpu_check, "WHEEL_DIR", tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    ctx = {"dry_run": False, "tmp": str(tmp_path), "model_path": "m", "deadline": float("inf")}
    outcome = gpu_check.part_zero3(gpu_check.SETTINGS["real"]["zero3"], ctx, float("inf"))
    assert outcome == {"lines": ["skipped: deepspeed not available (`import deepspeed` failed (X))."], "skipped": True}


@pytest.mark.parametrize("mode", ["real", "dry"])
def test_time_shares_cover_the_budget(mode):
    settings = gpu_check.SETTINGS[mode]
    assert sum(settings[part]["share"] for part in gpu_check.PARTS) == pytest.approx(1.0)
