"""Where a record came from: the time, the package's commit, the library versions, the thread count, the CPU and a
digest of the base weights. Every record the evidence's commands write (the studies' runs, the trivial baselines, the
task screening, the real-model demo) carries one, so a design declared in a commit can be checked against the runs it
claims (records written before this existed carry their command only; the lab's records module lists their files).
"""

import datetime
import hashlib
import importlib.metadata
import json
import subprocess
from pathlib import Path


LIBRARIES = ("torch", "transformers", "trl", "peft")
# The CPU flags that give native bf16 arithmetic. Without them torch runs a bf16 matmul (TRL's default bf16 autocast
# on CPU) through a generic loop, several times slower than float32 (bench/RESULTS.md measures both kinds of CPU), so
# records made on the two kinds have very different wall times.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def git_commit() -> str:
    """The commit of the package's checkout (``"unknown"`` outside one, e.g. an installed wheel)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
            cwd=Path(__file__).resolve().parent,  # the package's checkout, wherever the command runs
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def weights_digest(model_path: str | Path) -> str | None:
    """SHA-256 of a model folder's weights: the GGUF's recorded SHA-256 for a pretrained model converted by the package
    (its ``pretrained.json``), else of its ``*.safetensors`` files (sorted by name, hashed in order); ``None`` when
    the folder holds neither (e.g. a hub id)."""
    path = Path(model_path)
    provenance = path / "pretrained.json"
    if provenance.is_file():
        return json.loads(provenance.read_text()).get("gguf_sha256")
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def cpu_info(cpuinfo: str | None = None) -> dict:
    """``{model, bf16}`` of this machine's CPU, from ``/proc/cpuinfo`` (or the text ``cpuinfo``): the first model name,
    and whether it has native bf16 arithmetic (`BF16_FLAGS`); ``{model: platform.processor(), bf16: None}`` where
    there is no ``/proc/cpuinfo`` (not Linux: unknown, not guessed)."""
    import platform

    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        if not path.is_file():
            return {"model": platform.processor() or "unknown", "bf16": None}
        cpuinfo = path.read_text()
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", "unknown"), "bf16": bool(flags & set(BF16_FLAGS))}


def provenance(model_path: str | Path | None, num_threads: int, seed: int | None = None) -> dict:
    """``{time, commit, versions, num_threads, cpu, seed, weights_sha256}`` of a run on ``model_path``'s weights."""
    versions = {name: importlib.metadata.version(name) for name in LIBRARIES}
    versions["trl_rlvr_ext"] = importlib.metadata.version("trl-rlvr-ext")
    record = {
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "versions": versions,
        "num_threads": num_threads,
        "cpu": cpu_info(),
        "weights_sha256": weights_digest(model_path) if model_path is not None else None,
    }
    if seed is not None:
        record["seed"] = seed
    return record
