"""A study's records: every finished run of an output folder, one JSON object per line (``docs/evidence/data/``).

`export_records` collects the ``result.json`` of every finished (task, arm, seed) under a study's ``--out_dir`` into a
JSONL file, in a stable order (task, then the study's arm order, then seed), compact, one run per line. A run is its
own record, unchanged: the command that started it, its rerun command, its training log and its per-problem counts, so
that the pages render from these lines alone (`lab.studies.report`). Quick (smoke) runs are refused: their
numbers mean nothing. A path ending in ``.gz`` is gzip-compressed (a run that logs the off-policy diagnostics every
step is about 130 KB of JSON, a fifth of that compressed); `read_records_text` reads either.
"""

import gzip
import json
from pathlib import Path

from trl_rlvr_ext._io import atomic_write

from .run_files import RESULTS_GLOB, result_path


# Where a record comes from: the command that made it, as typed (its program and arguments), and, since records carry
# one (`trl_rlvr_ext.provenance`, commit 2d3d708, 2026-12-04), its ``provenance``: time, commit, library versions,
# threads. These files of ``docs/evidence/data`` were written before that and hold no provenance field; their command
# and the commit that added each line (``git log``) are where they come from. No other file may lack it.
RECORDS_BEFORE_PROVENANCE = (
    "base_steps.jsonl",
    "is_dpo.jsonl",
    "is_dpo_dense.jsonl",
    "is_dpo_rate_calibration.jsonl",
    "is_dpo_validated.jsonl",
    "is_dpo_validated_lr.jsonl",
    "lora_init.jsonl",
    "lora_init_confirm.jsonl",
    "lora_init_sweep.jsonl",
    "nsr/clip_calibration.jsonl.gz",
    "nsr/lr1e-4.jsonl",
    "nsr/lr3e-4.jsonl.gz",
    "nsr/updates16.jsonl.gz",
    "nsr/updates2.jsonl.gz",
    "nsr/updates32_lr6e-4.jsonl.gz",
    "self.jsonl",
    "self_validated.jsonl",
)
PROVENANCE_FIELDS = ("time", "commit", "versions", "num_threads")


def missing_provenance(record: dict, before_provenance: bool) -> list[str]:
    """What ``record`` lacks of its provenance (empty: nothing): a ``command`` with its program and at least one
    argument (``"trl-rlvr-ext baselines "`` names no records it read), and, unless the record's file was written
    before records carried one (``before_provenance``), a ``provenance`` with `PROVENANCE_FIELDS`."""
    missing = []
    words = str(record.get("command") or "").split()
    program = 3 if words[:3] == ["python", "-m", "lab"] else 1  # the program's own words, then its subcommand
    if len(words) < program + 2:
        missing.append(f"a command with its arguments (got {record.get('command')!r})")
    if not before_provenance:
        provenance = record.get("provenance") or {}
        missing += [f"provenance.{field}" for field in PROVENANCE_FIELDS if not provenance.get(field)]
    return missing


def end_probe(record: dict) -> dict | None:
    """The boundary probe a run's "end" columns read: its last probe after training began (step > 0). ``None`` for a
    run without one: a run shorter than the probe interval was only probed at step 0, where every change is 0 by
    definition, which is not a measurement of the trained model."""
    after = [row for row in record.get("boundary") or [] if row["step"] > 0]
    return max(after, key=lambda row: row["step"]) if after else None


def collect_results(out_dir: str | Path) -> list[dict]:
    """Every ``<task>/<arm>/seed<k>/result.json`` under ``out_dir``, as dicts."""
    paths = sorted(Path(out_dir).glob(RESULTS_GLOB))
    if not paths:
        raise FileNotFoundError(f"No finished run (<task>/<arm>/seed<k>/result.json) under {str(out_dir)!r}.")
    return [json.loads(path.read_text()) for path in paths]


def export_records(
    out_dir: str | Path | list[str | Path], path: str | Path, arm_order: list[str] | None = None
) -> int:
    """Write the finished runs of ``out_dir`` (or of several, e.g. one per setting whose runs share task, arm and seed)
    to the JSONL file ``path`` (replaced); returns the number of records. ``arm_order`` (the study's arms) orders the
    arms within a task; arms it does not name come after, by name; then seeds, then settings."""
    out_dirs = out_dir if isinstance(out_dir, list) else [out_dir]
    results = [result for folder in out_dirs for result in collect_results(folder)]
    quick = sorted({f"{r['task']}/{r['arm']}/seed{r['seed']}" for r in results if r.get("quick")})
    if quick:
        raise ValueError(f"{len(quick)} quick (smoke) runs under {str(out_dir)!r}, e.g. {quick[0]}: not records.")
    rank = {arm: i for i, arm in enumerate(arm_order or [])}
    results.sort(key=lambda r: (r["task"], rank.get(r["arm"], len(rank)), r["arm"], r["seed"], r.get("setting") or ""))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, separators=(",", ":"), default=float) for r in results]
    # The same run twice (two output folders holding one copy each) would count twice on the pages: refused here, at
    # write time, naming the run
    repeated = sorted(
        {f"{r['task']}/{r['arm']}/seed{r['seed']}" for r, n in zip(results, lines) if lines.count(n) > 1}
    )
    if repeated:
        raise ValueError(
            f"{len(repeated)} runs appear twice, identical, among {[str(d) for d in out_dirs]}, e.g. {repeated[0]}: "
            "keep one copy of each (a run's folder in one output directory only)."
        )
    text = "".join(line + "\n" for line in lines)
    # mtime=0: the same runs give the same bytes (a committed file changes only when its records do)
    atomic_write(path, gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text)
    return len(results)


def read_records_text(path: str | Path) -> str:
    """The text of a records file, gzip-compressed (``.gz``) or not."""
    path = Path(path)
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def restore_runs(path: str | Path, out_dir: str | Path, study: str) -> int:
    """Write each record of ``study`` in the JSONL file ``path`` back as its run's ``result.json`` under ``out_dir``
    where that run has none, so that a study resumed on another machine (a fresh clone, a later session) skips the
    runs its committed records already hold; returns how many were restored. A run whose result exists is left alone,
    and a record of another study is refused."""
    restored = 0
    for number, line in enumerate(read_records_text(path).splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("study") != study:
            raise ValueError(f"{path}:{number} is a record of study {record.get('study')!r}, not {study!r}.")
        target = result_path(out_dir, record["task"], record["arm"], record["seed"])
        if target.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, json.dumps(record, indent=1, default=float))
        restored += 1
    return restored
