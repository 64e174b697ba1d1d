"""Golden outputs of tiny ``--quick`` study runs: each study's ``results.md`` and every ``result.json`` it writes equal
the committed copies under ``tests/golden/studies/<study>/``, so that moving the studies' code changes no output.

Normalised, and only these, because they legitimately differ from one run to the next: the clock (``wall_seconds``,
``train_seconds``, ``build_seconds``, the trainer's ``train_runtime`` / ``*_per_second`` / ``step_time``, and the
``train s`` / ``wall s`` columns of the tables) and the output folder, which is the test's temporary directory (it
appears in the commands and in the trainer's ``output_dir``), and a run's ``provenance`` (its time, commit, library
versions, thread count and the base's weight digest, which name the machine and the moment, not the run's outcome).
Every other byte is compared, numbers included, with one allowance: a run is deterministic on one machine (same seeds,
one process), but torch picks its CPU kernels by instruction set (AVX2, AVX-512, AMX), so another machine sums in
another order. A float in a ``result.json`` may therefore differ from its copy by float32 rounding (relative 1e-5, or
absolute 1e-4 for a difference of near-equal sums such as a KL estimate); its key, type and every other value may not,
and the rendered tables (three decimals) are compared byte for byte.

The quick runs train in fp32 (`lab.studies.run_inputs.common_training_settings`), because under TRL's default
bf16 autocast the spread between instruction sets exceeds any float32 allowance: a quick IS-DPO run's KL was -0.010092
on an AVX2-only CPU and -0.010234 on an AVX512-BF16 one (1.4e-4 apart), and -0.009781 against -0.010029 between the
same AVX512-BF16 CPU's own kernels and its AVX2 ones. Measured on 2026-12-06 for the four runs below in fp32, on an
AVX512-BF16 CPU with its own kernels against the same CPU restricted to AVX2 kernels
(``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2``): 636 floats, the largest absolute
difference 5.7e-6, well inside ``ABS_TOL`` (the relative allowance binds only for values far from 0, which moved by
less). ``test_golden_copies_hold_under_avx2_kernels`` repeats that comparison on every run of the suite.

After an intended change of the outputs, rewrite the copies with ``TRL_RLVR_EXT_UPDATE_GOLDEN=1`` and review the diff.
"""

import json
import math
import os
import re
from pathlib import Path

import pytest

from lab.cli import main


GOLDEN = Path(__file__).resolve().parent / "golden" / "studies"
CLOCK_KEYS = {"wall_seconds", "train_seconds", "build_seconds", "train_runtime", "step_time"}
# (study, the arguments after `study <name> --quick`): the smallest run that still renders each study's table.
RUNS = {
    "self": ["--tasks", "toy", "--seeds", "0", "--arms", "base,self"],
    "nsr": ["--tasks", "toy", "--seeds", "0", "--arms", "none,nsr"],
    "is_dpo": ["--tasks", "number_sorting", "--seeds", "0"],
    "lora_init": ["--tasks", "number_sorting", "--seeds", "0", "--arms", "base,rlpo@5e-4"],
}


def _normalise_json(value, out: str):
    if isinstance(value, dict):
        return {
            key: "<clock>"
            if key in CLOCK_KEYS or key.endswith("_per_second")
            else "<provenance>"
            if key == "provenance"
            else _normalise_json(item, out)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_normalise_json(item, out) for item in value]
    if isinstance(value, str):
        return value.replace(out, "<out>")
    return value


def _normalise_table(text: str, out: str) -> str:
    """The output folder as ``<out>``, and the cells of the ``train s`` / ``wall s`` columns as ``<clock>``."""
    lines, clock_columns = [], []
    for line in text.replace(out, "<out>").splitlines(keepends=True):
        if line.startswith("|"):
            cells = line.rstrip("\n").split("|")
            if not set(line.strip()) <= set("|-"):  # a header row decides the columns of the rows below it
                if any(cell.strip() in ("train s", "wall s") for cell in cells):
                    clock_columns = [i for i, cell in enumerate(cells) if cell.strip() in ("train s", "wall s")]
                elif clock_columns and len(cells) > max(clock_columns):
                    for i in clock_columns:
                        cells[i] = " <clock> " if cells[i].strip() not in ("-", "") else cells[i]
                    line = "|".join(cells) + "\n"
        else:
            clock_columns = [] if not line.strip() else clock_columns
        lines.append(line)
    return "".join(lines)


# float32 rounding between CPU kernels (see the module's docstring); a moved line of code changes far more than this
REL_TOL, ABS_TOL = 1e-5, 1e-4


def _differences(new, old, where: str = "") -> list[str]:
    """Where ``new`` differs from ``old`` beyond float32 rounding between CPU kernels: a float within
    ``REL_TOL``/``ABS_TOL`` of its copy counts as equal; every other value (keys, lengths, types, ints, strings) is
    compared exactly."""
    if isinstance(new, float) and isinstance(old, float):
        same = math.isclose(new, old, rel_tol=REL_TOL, abs_tol=ABS_TOL) or (math.isnan(new) and math.isnan(old))
        return [] if same else [f"{where}: {new!r} != {old!r}"]
    if type(new) is not type(old):
        return [f"{where}: {new!r} != {old!r}"]
    if isinstance(new, dict):
        if sorted(new) != sorted(old):
            return [f"{where}: keys {sorted(new)} != {sorted(old)}"]
        return [d for key in new for d in _differences(new[key], old[key], f"{where}/{key}")]
    if isinstance(new, list):
        if len(new) != len(old):
            return [f"{where}: {len(new)} items != {len(old)}"]
        return [d for i, (a, b) in enumerate(zip(new, old)) for d in _differences(a, b, f"{where}[{i}]")]
    return [] if new == old else [f"{where}: {new!r} != {old!r}"]


def _outputs(out: Path) -> dict[str, str]:
    files = {"results.md": _normalise_table((out / "results.md").read_text(), str(out))}
    for path in sorted(out.rglob("result.json")):
        record = _normalise_json(json.loads(path.read_text()), str(out))
        files[path.relative_to(out).as_posix()] = json.dumps(record, indent=1, sort_keys=True) + "\n"
    return files


@pytest.mark.parametrize("study", sorted(RUNS))
def test_quick_study_outputs_equal_their_golden_copies(study, tmp_path):
    out = tmp_path / study
    assert main(["study", study, "--quick", *RUNS[study], "--out_dir", str(out)]) == 0
    files = _outputs(out)
    golden = GOLDEN / study
    if os.environ.get("TRL_RLVR_EXT_UPDATE_GOLDEN") == "1":
        for name, text in files.items():
            (golden / name).parent.mkdir(parents=True, exist_ok=True)
            (golden / name).write_text(text)
    _assert_equal_to_golden(files, golden, study)


def _assert_equal_to_golden(files: dict[str, str], golden: Path, label: str) -> None:
    committed = sorted(p.relative_to(golden).as_posix() for p in golden.rglob("*") if p.is_file())
    assert committed == sorted(files), f"{label}: the run wrote other files than {golden} holds"
    for name, text in files.items():
        copy = (golden / name).read_text()
        if name.endswith(".json"):
            differences = _differences(json.loads(text), json.loads(copy))
            assert not differences, f"{label}: {name} differs from its golden copy: {differences[:5]}"
        else:
            assert text == copy, f"{label}: {name} differs from its golden copy"


# The kernels of an AVX2-only CPU, on any x86 CPU: torch's own vector kernels, oneDNN's and MKL's, each capped at AVX2
AVX2_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


@pytest.mark.slow
def test_golden_copies_hold_under_avx2_kernels(tmp_path):
    """The golden copies written on one CPU hold on another: the IS-DPO quick run (the one whose bf16 KL moved between
    an AVX2-only and an AVX512-BF16 CPU before quick runs trained in fp32) rerun with torch, oneDNN and MKL held to
    AVX2 kernels equals its copies within the float32 allowance (on an AVX2-only CPU this is the plain run again)."""
    import subprocess
    import sys

    out = tmp_path / "is_dpo"
    command = [sys.executable, "-m", "lab", "study", "is_dpo", "--quick", *RUNS["is_dpo"]]
    root = str(Path(__file__).resolve().parents[1])  # the lab runs from the clone
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, **AVX2_KERNELS, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    capability = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert capability.stdout.strip() in ("AVX2", "DEFAULT"), capability.stdout  # the cap took effect
    proc = subprocess.run([*command, "--out_dir", str(out)], check=False, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    _assert_equal_to_golden(_outputs(out), GOLDEN / "is_dpo", "is_dpo under AVX2 kernels")


def test_only_float_rounding_is_allowed():
    old = {"loss": 0.7750850915908813, "kl": -0.010223388671875, "step": 3, "arm": "dpo", "log": [1.0, float("nan")]}
    assert _differences({**old, "loss": 0.7750850319862366, "kl": -0.010233561197916666}, old) == []
    assert _differences({**old, "loss": 0.7752}, old) == ["/loss: 0.7752 != 0.7750850915908813"]
    assert _differences({**old, "kl": -0.0105}, old) == ["/kl: -0.0105 != -0.010223388671875"]
    assert _differences({**old, "log": [1.0, 2.0]}, old) == ["/log[1]: 2.0 != nan"]
    assert _differences({**old, "step": 4}, old) == ["/step: 4 != 3"]
    assert _differences({**old, "step": 3.0}, old) == ["/step: 3.0 != 3"]
    assert _differences({**old, "log": [1.0]}, old) == ["/log: 1 items != 2"]
    assert _differences({k: v for k, v in old.items() if k != "arm"}, old)[0].startswith(": keys")


def test_the_table_normaliser_touches_only_the_clock_columns():
    text = (
        "| arm | pass@1 | train s | wall s |\n|---|---|---|---|\n| base | 0.500 | 0 | 1 |\n| chance | 0.1 | - | - |\n"
    )
    assert _normalise_table(text, "/nowhere") == (
        "| arm | pass@1 | train s | wall s |\n|---|---|---|---|\n| base | 0.500 | <clock> | <clock> |\n"
        "| chance | 0.1 | - | - |\n"
    )
    assert re.search("<clock>", _normalise_table("no table here 1 s\n", "/nowhere")) is None


def test_every_page_is_still_rendered():
    """`stale_pages` compares only the pages the studies render: a page dropped from the registry would pass it
    silently, so the set of rendered pages is pinned here."""
    from lab.studies.report import render_pages

    root = Path(__file__).resolve().parents[1]
    assert sorted(render_pages(root)) == [
        "docs/evidence/index.md",
        "docs/evidence/is_dpo.md",
        "docs/evidence/is_dpo/dense.md",
        "docs/evidence/is_dpo/forest.svg",
        "docs/evidence/is_dpo/validated.md",
        "docs/evidence/lora_init.md",
        "docs/evidence/lora_init/forest.svg",
        "docs/evidence/nsr.md",
        "docs/evidence/nsr/acpo.md",
        "docs/evidence/nsr/forest.svg",
        "docs/evidence/nsr/heldout.md",
        "docs/evidence/nsr/heldout_compact.md",
        "docs/evidence/nsr/results.md",
        "docs/evidence/pretrained.md",
        "docs/evidence/pretrained/forest.svg",
        "docs/evidence/rule.md",
        "docs/evidence/self.md",
        "docs/evidence/self/bases.md",
        "docs/evidence/self/forest.svg",
        "docs/evidence/self/results.md",
        "docs/methods/acpo.md",
        "docs/methods/delta.md",
        "docs/methods/is_dpo.md",
        "docs/methods/lora_init.md",
        "docs/methods/nsr.md",
        "docs/methods/pass_rate_curation.md",
        "docs/methods/popo.md",
        "docs/methods/relex.md",
        "docs/methods/rsi.md",
        "docs/methods/self_curation.md",
    ]
