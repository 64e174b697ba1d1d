"""Golden outputs of tiny ``--quick`` study runs: each study's ``results.md`` and every ``result.json`` it writes equal
the committed copies under ``tests/golden/studies/<study>/``, so that moving the studies' code changes no output.

Normalised, and only these, because they legitimately differ from one run to the next: the clock (``wall_seconds``,
``train_seconds``, ``build_seconds``, the trainer's ``train_runtime`` / ``*_per_second`` / ``step_time``, and the
``train s`` / ``wall s`` columns of the tables) and the output folder, which is the test's temporary directory (it
appears in the commands and in the trainer's ``output_dir``), and a run's ``provenance`` (its time, commit, library
versions, thread count and the base's weight digest, which name the machine and the moment, not the run's outcome).
Every other byte is compared, numbers included: a run is deterministic on one machine (same seeds, one process).

After an intended change of the outputs, rewrite the copies with ``TRL_RLVR_EXT_UPDATE_GOLDEN=1`` and review the diff.
"""

import json
import os
import re
from pathlib import Path

import pytest

from trl_rlvr_ext.cli import main


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
    committed = sorted(p.relative_to(golden).as_posix() for p in golden.rglob("*") if p.is_file())
    assert committed == sorted(files), f"the run wrote other files than {golden} holds"
    for name, text in files.items():
        assert text == (golden / name).read_text(), f"{study}: {name} differs from its golden copy"


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
    from trl_rlvr_ext.studies.report import render_pages

    root = Path(__file__).resolve().parents[1]
    assert sorted(render_pages(root)) == [
        "docs/evidence/index.md",
        "docs/evidence/is_dpo.md",
        "docs/evidence/lora_init.md",
        "docs/evidence/nsr.md",
        "docs/evidence/pretrained.md",
        "docs/evidence/self.md",
        "docs/methods/acpo.md",
        "docs/methods/delta.md",
        "docs/methods/is_dpo.md",
        "docs/methods/lora_init.md",
        "docs/methods/nsr.md",
        "docs/methods/pass_rate_curation.md",
        "docs/methods/self_curation.md",
    ]
