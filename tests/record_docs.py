"""Record a run of a Markdown page's code blocks (or of one shell command): what each block printed, its wall and CPU
time, and the machine it ran on. The numbers a docs page shows come from such a record, kept beside the page.

    python tests/record_docs.py docs/tutorials/reasoning_gym.md docs/tutorials/data/reasoning_gym.json
    python tests/record_docs.py --command "trl-rlvr-ext demo" --command "trl-rlvr-ext demo" docs/data/demo.json

A page runs as the docs tests run it (`docs_helpers`: as printed, in page order, in one empty directory, blocks marked
``skip`` left out), at the size the environment sets (``TRL_RLVR_EXT_TOY_SIZE`` unset: full size), offline, with the
base-model cache in a fresh directory unless ``--cache`` names one (so the times include the base-model builds).
``--command`` (repeatable) records shell commands instead, each a block, run one after the other in one directory.
`tests/test_docs_records.py` checks that what a page shows between ``<!-- records: FILE PART -->`` and
``<!-- /records -->`` is what FILE renders.

Times are wall-clock seconds and CPU seconds (this process and its children, user + system). The machine may be
shared: the load average at the start and end of each block is recorded with it, so a reader can see whether the wall
time is inflated by other work (CPU time is not, or much less).
"""

import argparse
import contextlib
import datetime
import io
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_helpers import ROOT, RUN_LANGUAGES, bash_environment, code_blocks, run_block


RECORDER = "tests/record_docs.py"


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class _Tee(io.TextIOBase):
    """Prints through to the terminal and keeps a copy."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text):
        self.stream.write(text)
        return self.copy.write(text)

    def flush(self):
        self.stream.flush()


def _timed(run) -> dict:
    load_start, wall, cpu = os.getloadavg()[0], time.perf_counter(), _cpu_seconds()
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        returned = run()
    stdout = tee.copy.getvalue() + (returned or "")
    sys.stdout.write(returned or "")
    return {
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(_cpu_seconds() - cpu, 1),
        "load_average_1min": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "stdout": stdout,
    }


def section_of(block) -> str | None:
    """The title of the last heading above ``block`` (what the block is, for a reader of the records)."""
    prose = re.sub(r"^```.*?^```", "", block.preceding_text, flags=re.DOTALL | re.MULTILINE)  # not code comments
    titles = re.findall(r"^#+ (.+?)(?: \{.*\})?$", prose, flags=re.MULTILINE)
    return titles[-1].strip() if titles else None


def record_page(page: Path, workdir: Path) -> list[dict]:
    namespace = {"__name__": "__main__"}
    records = []
    run = [block for block in code_blocks(page) if block.language in RUN_LANGUAGES and block.mark != "skip"]
    # numbered among the blocks run (not all fenced blocks), so that the output blocks a page shows from its records
    # do not shift the numbers when the page is recorded again
    for number, block in enumerate(run, start=1):
        print(f"--- {block.where}", file=sys.stderr, flush=True)
        entry = {"number": number, "line": block.line, "language": block.language}
        entry["first_line"] = block.code.strip().splitlines()[0]
        entry["section"] = section_of(block)
        entry.update(_timed(lambda block=block: run_block(block, workdir, namespace, timeout=3600)))
        records.append(entry)
    return records


def record_commands(commands: list[str], workdir: Path) -> list[dict]:
    return [
        {
            "number": number,
            "line": None,
            "language": "bash",
            "first_line": command,
            **_timed(_command(command, workdir)),
        }
        for number, command in enumerate(commands, start=1)
    ]


def _command(command: str, workdir: Path):
    def run():
        proc = subprocess.run(
            ["bash", "-e", "-c", command],
            check=False,
            cwd=workdir,
            env=bash_environment(),
            capture_output=True,
            text=True,
        )
        sys.stderr.write(proc.stderr[-3000:])
        if proc.returncode != 0:
            raise SystemExit(f"{command!r} exited with status {proc.returncode}")
        return proc.stdout

    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", nargs="?", help="a Markdown file whose runnable blocks to run (or give --command)")
    parser.add_argument("out", help="the JSON records file to write")
    parser.add_argument("--command", action="append", help="record this shell command instead of a page (repeatable)")
    parser.add_argument("--cache", help="base-model cache root (default: a fresh, empty directory)")
    args = parser.parse_args(argv)
    if (args.page is None) == (args.command is None):
        parser.error("give a page or --command, not both")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="record_docs_") as tmp:
        cache = Path(args.cache or Path(tmp) / "cache")
        cache.mkdir(parents=True, exist_ok=True)
        cache_empty = not any(cache.iterdir())
        os.environ["TRL_RLVR_EXT_CACHE"] = str(cache)
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        load_start, start = os.getloadavg(), time.perf_counter()
        if args.command:
            blocks = record_commands(args.command, workdir)
        else:
            blocks = record_page(Path(args.page).resolve(), workdir)
        load_end = os.getloadavg()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=False, capture_output=True, text=True
    ).stdout
    records = {
        "recorder": RECORDER,
        "command": "python " + shlex.join([RECORDER, *(argv if argv is not None else sys.argv[1:])]),
        "page": str(Path(args.page).resolve().relative_to(ROOT)) if args.page else None,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": commit.strip(),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in load_end],
        },
        "environment": {
            key: os.environ.get(key)
            for key in ("OMP_NUM_THREADS", "TRL_RLVR_EXT_TOY_SIZE", "HF_HUB_OFFLINE")
            if os.environ.get(key) is not None
        },
        "cache_empty_at_start": cache_empty,
        "versions": {name: version(name) for name in ("torch", "transformers", "trl")},
        "total_wall_s": round(time.perf_counter() - start, 1),
        "total_cpu_s": round(sum(block["cpu_s"] for block in blocks), 1),
        "blocks": blocks,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(records, indent=2) + "\n")
    print(f"wrote {args.out}: {records['total_wall_s']} s wall, {records['total_cpu_s']} s CPU", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
