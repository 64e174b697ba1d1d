"""`make bench-quick`: every benchmark's ``--quick`` run, one process each, and one line per option at the end.

    python bench/quick.py                    # all of `BENCHES`, 2 at a time (a 2-core machine: one thread each),
                                             # the `EXCLUSIVE` ones alone at the end
    python bench/quick.py --only poise,popo  # some entries
    python bench/quick.py --jobs 1 --log-dir /tmp/bench-quick

Each entry of `BENCHES` runs in a process of its own (a crash shows as that entry's exit status, and the others still
run) under a time budget of its own (past it, the process group is killed and the entry counts as failed). Every
process's standard output is printed as it ends; its standard error (warnings, progress bars) stays in its log,
``<entry>.err.log``, and its end is printed when the run failed. A benchmark reports its ratios as
``quick-ratio <name> <ratio>`` lines (`report`); the targets are bench/targets.py's, each declared once. The summary
comes last:

    total 412 s (limit 600 s) ok
    bench nsr: ratio 1.011 (target <= 1.03) ok
    bench popo: ratio 2.104 (target <= 2) MISS

An option whose benchmark crashed, timed out or did not report it reads ``ratio - (...) MISS``. The exit status is 0
only when every entry exited 0, every option is ``ok`` and the total is within its limit.
"""

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
TOTAL_LIMIT_S = 600  # issue 46: every quick run together in at most 10 minutes on 2 cores
REPORT_PREFIX = "quick-ratio"
ERR_TAIL = 40  # lines of a failed run's stderr printed (all of it is in its log)

# entry: (command after the interpreter, budget in seconds). Adding a benchmark is one line here (and its options'
# targets in bench/targets.py). A budget is about twice the entry's CPU seconds as measured in a run of this script
# (bench/RESULTS.md), at least a minute: on an idle 2-core machine the entries take about 4-5 minutes in all, 2 at a
# time, the real model's GRPO options (about 3 minutes of CPU) the longest.
BENCHES = {
    "real_model:grpo": (["bench/real_model.py", "--quick", "--parts", "grpo"], 360),
    "real_model:dpo": (["bench/real_model.py", "--quick", "--parts", "dpo"], 150),
    "real_model:lora_init": (["bench/real_model.py", "--quick", "--parts", "lora_init"], 60),
    "poise": (["bench/poise_overhead.py", "--quick"], 60),
    "popo": (["bench/popo_overhead.py", "--quick"], 60),
    "relex": (["bench/relex.py", "--quick"], 60),
    "curation": (["bench/curation_overhead.py", "--quick"], 60),
    "dynamic_sampling": (["bench/dynamic_sampling.py", "--quick"], 60),
    "reward_timeout": (["bench/reward_timeout.py", "--quick"], 60),
    # the toy's runs of the options measured on the real model above: they run, their ratios are not checked
    "grpo_overhead": (["bench/grpo_overhead.py", "--quick"], 60),
    "acpo_overhead": (["bench/acpo_overhead.py", "--quick"], 60),
    "rsi_overhead": (["bench/rsi_overhead.py", "--quick"], 60),
    "delta_overhead": (["bench/delta_overhead.py", "--quick"], 60),
    "dpo_overhead": (["bench/dpo_overhead.py", "--quick"], 60),
    "lora_init": (["bench/lora_init.py", "--quick"], 60),
    # no option target: their exit status counts
    "cli_help": (["bench/cli_help.py", "--quick"], 60),
    "vllm_cpu": (["bench/vllm_cpu.py", "--quick"], 90),
    "sharding_cpu": (["bench/sharding_cpu.py", "--quick"], 150),  # two processes per launch, both cores
    "vllm_lora": (["bench/vllm_lora.py", "--quick"], 180),  # re-runs itself in the vLLM venv; 82 s on a loaded machine
}

# Entries that run alone, and why: their ratio compares arms that use different numbers of cores, so a neighbour
# on the other core would change what it measures.
EXCLUSIVE = {
    "reward_timeout": "its default arm is a pool of 2 worker processes against a direct call on one thread: beside "
    "another run the pool loses the second core, and the ratio measures that run, not the pool",
}

_REPORT = re.compile(rf"^{REPORT_PREFIX} (?P<name>[A-Za-z0-9_]+) (?P<ratio>\S+)$")
_SUMMARY = re.compile(
    r"^bench (?P<name>[A-Za-z0-9_]+): ratio (?P<ratio>-|[0-9.]+(?:e[+-]?[0-9]+)?) \(target <= (?P<limit>[0-9.]+)\) "
    r"(?P<verdict>ok|MISS)$"
)


def report(name: str, ratio: float) -> None:
    """What a benchmark's ``--quick`` run prints for each option it owns (the runner reads these lines)."""
    print(f"{REPORT_PREFIX} {name} {ratio:.6g}", flush=True)


def quick_defaults(parser: argparse.ArgumentParser, argv=None, **defaults) -> None:
    """Add ``--quick`` to a benchmark's parser; when it is given, ``defaults`` replace the parser's (an option given
    explicitly still wins)."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the settings of `make bench-quick`: " + ", ".join(f"{k}={v}" for k, v in defaults.items()),
    )
    if "--quick" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(**defaults)


def parse_reports(text: str) -> dict[str, float]:
    """The ``quick-ratio`` lines of a benchmark's output: {name: ratio}."""
    found = {}
    for line in text.splitlines():
        if match := _REPORT.match(line.strip()):
            found[match["name"]] = float(match["ratio"])
    return found


def summary_line(name: str, ratio: float | None, limit: float) -> str:
    """``bench <name>: ratio <x> (target <= <y>) ok|MISS``; a missing (None) or non-finite ratio is a MISS."""
    if ratio is None or not math.isfinite(ratio):
        return f"bench {name}: ratio - (target <= {limit:g}) MISS"
    return f"bench {name}: ratio {ratio:.3f} (target <= {limit:g}) {'ok' if ratio <= limit else 'MISS'}"


def parse_summary_line(line: str) -> dict | None:
    """{name, ratio (None if missing), limit, ok} of a summary line, or None for any other line."""
    match = _SUMMARY.match(line)
    if match is None:
        return None
    ratio = None if match["ratio"] == "-" else float(match["ratio"])
    return {"name": match["name"], "ratio": ratio, "limit": float(match["limit"]), "ok": match["verdict"] == "ok"}


def _start(name: str, log_dir: Path, budget_scale: float) -> dict:
    command, budget = BENCHES[name]
    budget *= budget_scale
    stem = log_dir / name.replace(":", "-")
    log = open(f"{stem}.log", "w")  # noqa: SIM115 (closed in _finish, when the process ends)
    err = open(f"{stem}.err.log", "w")  # noqa: SIM115
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "HF_HUB_OFFLINE": "1",
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, *command], cwd=ROOT, env=env, stdout=log, stderr=err, start_new_session=True
    )
    return {"name": name, "proc": proc, "log": log, "err": err, "start": time.monotonic(), "budget": budget}


def _finish(run: dict, code: int, cpu: float, timed_out: bool) -> dict:
    run["log"].close()
    run["err"].close()
    seconds = time.monotonic() - run["start"]
    text = Path(run["log"].name).read_text(errors="replace")
    status = f"killed after its budget of {run['budget']:.0f} s" if timed_out else f"exit {code}"
    print(f"\n=== {run['name']}: {' '.join(BENCHES[run['name']][0])} ({status}, {seconds:.0f} s)", flush=True)
    print(text.rstrip(), flush=True)
    failed = timed_out or code != 0
    if failed:  # its warnings and progress bars stay in the log; a failure shows the end of them
        errors = Path(run["err"].name).read_text(errors="replace").splitlines()
        print(f"--- the last {min(len(errors), ERR_TAIL)} lines of its stderr ({run['err'].name}):", flush=True)
        print("\n".join(errors[-ERR_TAIL:]), flush=True)
    return {"seconds": seconds, "cpu": cpu, "status": status, "failed": failed, "ratios": parse_reports(text)}


def run_order(names: list[str]) -> list[str]:
    """The largest budgets first (the longest runs overlap the others), the `EXCLUSIVE` entries last (alone)."""
    return sorted(names, key=lambda n: (n in EXCLUSIVE, -BENCHES[n][1]))


def next_to_start(pending: list[str], running: list[str], jobs: int) -> str | None:
    """The entry to start now, or None: at most ``jobs`` at once, and an `EXCLUSIVE` entry only on an empty machine,
    with nothing started beside it."""
    if not pending or len(running) >= jobs or any(name in EXCLUSIVE for name in running):
        return None
    name = pending[0]
    return None if name in EXCLUSIVE and running else name


def run_all(names: list[str], jobs: int, log_dir: Path, budget_scale: float = 1.0) -> dict[str, dict]:
    """Run the entries, ``jobs`` at a time (`EXCLUSIVE` ones alone, last), the largest budgets first, each under its
    budget times ``budget_scale``;
    {entry: result}. Each result has the entry's
    CPU seconds (its process and the children it waited for): on a machine shared with other jobs, the figure that
    says what an idle one would take."""
    pending = run_order(names)
    running, results = [], {}
    while pending or running:
        while (name := next_to_start(pending, [run["name"] for run in running], jobs)) is not None:
            pending.remove(name)
            running.append(_start(name, log_dir, budget_scale))
        time.sleep(0.5)
        for run in list(running):
            pid, status, usage = os.wait4(run["proc"].pid, os.WNOHANG)
            killed = pid == 0
            if killed:
                if time.monotonic() - run["start"] <= run["budget"]:
                    continue
                os.killpg(run["proc"].pid, 9)  # past its budget: the entry's own process group (its children too)
                _, status, usage = os.wait4(run["proc"].pid, 0)
            running.remove(run)
            run["proc"].returncode = code = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            results[run["name"]] = _finish(run, code, usage.ru_utime + usage.ru_stime, killed)
    return results


def summarize(
    results: dict[str, dict], total_seconds: float, limit: float = TOTAL_LIMIT_S, jobs: int = 2
) -> tuple[list[str], bool]:
    """The summary lines (runs, total, then one line per option, last) and whether everything passed."""
    from targets import TARGETS

    lines, passed = ["", "== bench-quick: every run"], True
    for name, result in results.items():
        lines.append(f"{name}: {result['status']}, {result['seconds']:.0f} s, CPU {result['cpu']:.0f} s")
        passed &= not result["failed"]
    cpu = sum(result["cpu"] for result in results.values())
    # on an idle machine with a core per job: the CPU seconds shared out, or the longest run if it is longer
    idle = max(cpu / max(1, min(jobs, len(results))), max((r["cpu"] for r in results.values()), default=0.0))
    lines.append(f"CPU {cpu:.0f} s over all runs: on an idle {jobs}-core machine, about {idle:.0f} s at {jobs} jobs")
    within = total_seconds <= limit
    passed &= within
    lines.append(f"total {total_seconds:.0f} s (limit {limit} s) {'ok' if within else 'MISS'}")
    for option, target in TARGETS.items():
        if target.bench not in results:
            continue
        line = summary_line(option, results[target.bench]["ratios"].get(option), target.limit)
        passed &= line.endswith(" ok")
        lines.append(line)
    return lines, passed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="entries run at once (2: one per core of a 2-core box)")
    parser.add_argument("--only", default=None, help=f"comma-separated entries among {', '.join(BENCHES)}")
    parser.add_argument("--log-dir", default=None, help="where each entry's output is kept (default: a temp dir)")
    parser.add_argument(
        "--budget-scale",
        type=float,
        default=1.0,
        help="multiply every entry's budget (e.g. 3 on a machine shared with other jobs, to get every ratio; the "
        "total is still checked against 10 minutes)",
    )
    args = parser.parse_args(argv)
    names = list(BENCHES) if args.only is None else [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        parser.error(f"--only: unknown {unknown}; choose among {', '.join(BENCHES)}.")
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="bench-quick-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"bench-quick: {len(names)} runs, {args.jobs} at a time, budgets x{args.budget_scale:g}, logs in {log_dir}",
        flush=True,
    )
    start = time.monotonic()
    results = run_all(names, args.jobs, log_dir, args.budget_scale)
    lines, passed = summarize({n: results[n] for n in names}, time.monotonic() - start, jobs=args.jobs)
    print("\n".join(lines), flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
