"""``python -m lab study <name>``: run (or resume) a study: arms x seeds on tasks, Pass@k table and plots.

    python -m lab study self --tasks toy --seeds 0,1,2 --out_dir outputs/studies/self
    python -m lab study run self --tasks toy            # the same, with the subcommand spelled out
    python -m lab study self --quick --tasks toy        # a smoke run in seconds; its numbers mean nothing
    python -m lab study self --tasks 'reasoning_gym:count_bits?max_n=100000'   # a study on your own task
    python -m lab study report self [--check]           # render docs/evidence/self.md from its records
    python -m lab study export nsr outputs/studies/nsr docs/evidence/data/nsr/lr3e-4.jsonl.gz   # runs -> records

Finished runs (``<out_dir>/<task>/<arm>/seed<k>/result.json``) are loaded, not redone. ``study report`` renders the
evidence pages' tables, intervals and verdicts from the committed records (`lab.studies.report`).
"""

import argparse
import dataclasses
import shlex
import sys


def make_parser() -> argparse.ArgumentParser:
    from ..studies import STUDIES, StudySizes

    parser = argparse.ArgumentParser(
        prog="python -m lab study",
        description="Run a study: arms x seeds on its tasks; each final model is evaluated with the unbiased Pass@k "
        "on held-out problems. Writes <out_dir>/results.md (mean ± sd over seeds) and PNG plots. Resumable.",
        epilog="Subcommands: "
        + "; ".join(f"`{name}`: {text}" for name, text in SUBCOMMANDS.items())
        + ". `python -m lab study <name>` is `python -m lab study run <name>`; `python -m lab study report <name>` renders "
        "the evidence page docs/evidence/<name>.md from its committed records instead (tables, intervals, verdicts; "
        "see `python -m lab study report --help`).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("name", choices=sorted(STUDIES), help="The study.")
    parser.add_argument("--out_dir", default=None, help="Output folder (default: outputs/studies/<name>[-quick]).")
    parser.add_argument(
        "--tasks",
        default=None,
        help="Comma-separated tasks (default: all of the study's); an entry may be a dataset name instead, e.g. "
        "'reasoning_gym:count_bits?max_n=100000' (a base is warm-started for it; see lab.studies.user_tasks).",
    )
    parser.add_argument("--reward", default=None, help="The reward of the dataset names in --tasks (if not implied).")
    parser.add_argument("--base_model", default=None, help="The base model of the dataset names in --tasks.")
    parser.add_argument(
        "--arms",
        default=None,
        help="Comma-separated arms (default: all of the study's), or a study's arm set picked from the runs already in "
        "--out_dir (lora_init: 'chosen', each method at its best swept learning rate; needs one --tasks).",
    )
    parser.add_argument("--seeds", default="0,1,2", help="Comma-separated training seeds.")
    parser.add_argument(
        "--setting",
        default=None,
        help="A regime the study declares in its code (nsr: 'updates2', 'updates16'); its sizes become the "
        "defaults that the size options below override. Default: the study's own sizes.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Smoke run: untrained tiny models, 2 steps, 3 problems x 4 samples. Its numbers mean nothing.",
    )
    parser.add_argument(
        "--records",
        default=None,
        help="A JSONL records file of this study (e.g. docs/evidence/data/<name>.jsonl): its runs are written back to "
        "--out_dir first where missing, so they are skipped, not redone (resuming on a fresh clone).",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="Processes side by side, when runs are left at two seeds or more. The runs left are cut into units (one "
        "seed's arms, an arm kept with the arm whose same-seed run it needs), handed out seed by seed to whichever "
        "process is free; each resumes like the whole. The table is written once all have finished. 1: one process.",
    )
    parser.add_argument(
        "--num_threads",
        type=int,
        default=1,
        help="torch threads per process (with the default 2 workers on 2 cores: one each, so that wall times compare).",
    )
    # A worker of --workers N records the command its parent was given, not its own.
    parser.add_argument("--recorded_command", default=None, help=argparse.SUPPRESS)
    for field in dataclasses.fields(StudySizes):
        parser.add_argument(
            f"--{field.name}",
            type=type(field.default),
            default=None,
            help=f"Override the study's default (the generic default is {field.default}).",
        )
    return parser


def _list(text: str | None) -> list[str] | None:
    return None if text is None else [part for part in text.split(",") if part]


def make_report_parser() -> argparse.ArgumentParser:
    from ..studies.report import PAGES

    parser = argparse.ArgumentParser(
        prog="python -m lab study report",
        description="Render the evidence pages from their JSONL records: Pass@k tables (mean ± sd), per-seed rows, "
        "each claim's paired effect with its 95 % interval (crossed bootstrap and t), the minimum detectable effect "
        "and the verdict of the rule, commands and wall times. Rewrites the blocks between '<!-- rendered: ... -->' "
        "markers of docs/evidence/<name>.md and its detail pages (docs/evidence/<name>/*.md), the index, the rule "
        "page and the method pages' evidence boxes (prose outside is kept), and writes each page's forest plot "
        "(docs/evidence/<name>/forest.svg).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("names", nargs="+", choices=[*sorted(PAGES), "all"], help="The studies whose pages to render.")
    parser.add_argument("--root", default=".", help="The repository root (holds docs/).")
    parser.add_argument(
        "--check",
        action="store_true",
        help="Write nothing; exit 1 if a page or a figure differs from what its records render.",
    )
    return parser


def export_main(argv: list[str]) -> int:
    """``python -m lab study export <name> <out_dir> [<out_dir> ...] <records.jsonl>``: a study's finished runs as its
    JSONL records."""
    from ..studies import STUDIES, get_study
    from ..studies.records import export_records

    parser = argparse.ArgumentParser(
        prog="python -m lab study export",
        description="Write every finished run (<task>/<arm>/seed<k>/result.json) under a study's --out_dir (or several: "
        "one per setting whose runs share task, arm and seed) to a JSONL records file (replaced), one run per line, "
        "ordered by task, the study's arm order, seed and setting. The evidence pages render from these files "
        "(python -m lab study report).",
    )
    parser.add_argument("name", choices=sorted(STUDIES), help="The study (for its arm order).")
    parser.add_argument("out_dirs", nargs="+", metavar="out_dir", help="The study's output folder(s).")
    parser.add_argument("records", help="The JSONL file to write, e.g. docs/evidence/data/nsr/updates16.jsonl.")
    args = parser.parse_args(argv)
    count = export_records(args.out_dirs, args.records, arm_order=list(get_study(args.name).arms))
    print(f"{count} records: {args.records}")
    return 0


def report_main(argv: list[str]) -> int:
    from pathlib import Path

    from ..studies.report import PAGES, render_pages, stale_pages

    args = make_report_parser().parse_args(argv)
    names = list(PAGES) if "all" in args.names else list(dict.fromkeys(args.names))
    root = Path(args.root)
    rendered = render_pages(root, names)
    stale = stale_pages(root, names, rendered)
    if not args.check:
        for path in stale:  # a figure's folder may not exist yet
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(rendered[path])
    for path in stale:
        print(f"{'differs from its records' if args.check else 'rendered'}: {path}")
    if args.check and stale:
        print("Run `python -m lab study report " + " ".join(args.names) + "` to render them.", file=sys.stderr)
        return 1
    return 0


def run_main(argv: list[str], command: str) -> int:
    """``python -m lab study [run] <name> ...``: run (or resume) a study; ``command`` is recorded in every result."""
    from ..studies import StudySizes, get_study, plan_study, run_study
    from ..studies.runner import result_path

    args = make_parser().parse_args(argv)
    try:
        seeds = [int(s) for s in _list(args.seeds)]
    except ValueError:
        raise SystemExit(
            f"python -m lab study: --seeds must be comma-separated integers, got {args.seeds!r}."
        ) from None
    for name in ("workers", "num_threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"python -m lab study: --{name} must be at least 1, got {getattr(args, name)}.")
    study = get_study(args.name)
    reference = study.default_sizes(args.quick, args.setting)  # an unknown setting fails here, naming the known ones
    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(StudySizes) if getattr(args, f.name) is not None
    }
    sizes = dataclasses.replace(reference, **overrides)
    suffix = (f"-{args.setting}" if args.setting else "") + ("-quick" if args.quick else "")
    out_dir = args.out_dir or f"outputs/studies/{args.name}{suffix}"
    if args.records:
        from ..studies.records import restore_runs

        print(f"{restore_runs(args.records, out_dir, args.name)} finished runs restored from {args.records}")
    selection = {"tasks": _list(args.tasks), "arms": _list(args.arms), "setting": args.setting}
    selection.update(reward=args.reward, base_model=args.base_model)
    if args.workers > 1:
        # a bad choice fails here, once, before any process starts
        plan = plan_study(study, out_dir, seeds=seeds, **selection)
        units = [  # the units with a run left: a finished study resumes in this process, only loading
            (seed, arms)
            for seed, arms in work_units(plan)
            if any(not result_path(out_dir, t, a, seed).is_file() for t in plan.tasks for a in arms)
        ]
        # with runs left at two seeds or more, every run left (then the loop below only loads them and writes the
        # table); the runs of a single seed stay in this process, as with --workers 1
        if len({seed for seed, _ in units}) > 1:
            _run_workers(argv, units, args.workers, args.recorded_command or command)
    import torch

    torch.set_num_threads(args.num_threads)
    run_study(
        study,
        out_dir,
        seeds=seeds,
        sizes=sizes,
        quick=args.quick,
        command=args.recorded_command or command,
        **selection,
    )
    return 0


def work_units(plan) -> list[tuple[int, list[str]]]:
    """The runs of ``plan`` (`lab.studies.runner.StudyPlan`) as ``(seed, arms)`` units that processes can run
    side by side: per seed, the arms in groups closed under `Arm.depends_on` (an arm stays with the arm whose same-seed
    run sets its budget or holds its trajectory, so it starts after that run), each group in the plan's order; seed by
    seed, so that an interrupted study has every arm at its first seeds."""
    order = {name: i for i, name in enumerate(plan.arms)}
    group = {name: name for name in plan.arms}

    def root(name: str) -> str:
        while group[name] != name:
            name = group[name]
        return name

    for name in plan.arms:
        source = plan.study.arms[name].depends_on
        if source in group:
            group[root(name)] = root(source)
    groups: dict[str, list[str]] = {}
    for name in plan.arms:
        groups.setdefault(root(name), []).append(name)
    chains = sorted(groups.values(), key=lambda arms: order[arms[0]])
    return [(seed, arms) for seed in plan.seeds for arms in chains]


def _run_workers(argv: list[str], units: list[tuple[int, list[str]]], workers: int, recorded: str) -> None:
    """Run ``argv`` on each ``(seed, arms)`` unit (`work_units`), as at most ``workers`` processes at a time (each
    with ``--workers 1``): a unit starts as soon as a process slot is free, in the units' order. Their output lines are
    prefixed with their unit; fails, once every unit has run, naming the units that failed. Each records ``recorded``
    (the one typed) in its results, not its own."""
    import os
    import subprocess
    import threading
    import time
    from pathlib import Path

    def strip(args: list[str]) -> list[str]:  # ``argv`` without --seeds / --arms / --workers / --records
        out, skip = [], False
        for arg in args:
            if skip:
                skip = False
            elif arg in _WORKER_FLAGS:
                skip = True
            elif not arg.startswith(tuple(f"{flag}=" for flag in _WORKER_FLAGS)):
                out.append(arg)
        return out

    def relay(label: str, process) -> None:
        for line in process.stdout:
            print(f"[{label}] {line}", end="", flush=True)

    # the workers run `python -m lab` too, from wherever this one was started: the lab's clone goes first on their path
    clone = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (clone, os.environ.get("PYTHONPATH", "")) if p)}

    def start(seed: int, arms: list[str]):
        command = [sys.executable, "-m", "lab", "study", *strip(argv), "--seeds", str(seed)]
        command += ["--arms", ",".join(arms), "--workers", "1", "--recorded_command", recorded]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env
        )
        label = f"seed {seed}: {','.join(arms)}"
        print(f"[worker] {label}: pid {process.pid}", flush=True)
        thread = threading.Thread(target=relay, args=(label, process), daemon=True)
        thread.start()
        return label, process, thread

    queue, running, failed = list(units), [], []
    while queue or running:
        while queue and len(running) < workers:
            running.append(start(*queue.pop(0)))
        time.sleep(0.2)
        for entry in [entry for entry in running if entry[1].poll() is not None]:
            label, process, thread = entry
            thread.join()
            running.remove(entry)
            if process.returncode != 0:
                failed.append(f"{label} (exit status {process.returncode})")
    if failed:
        raise SystemExit(
            f"python -m lab study: worker(s) failed: {', '.join(failed)} (their output is above). The finished runs "
            "are kept: rerun the same command to resume."
        )


_WORKER_FLAGS = ("--seeds", "--arms", "--workers", "--records", "--recorded_command")


# The subcommands of `python -m lab study` and what each does. `study <name> ...` is `study run <name> ...`, so the
# command lines written before the subcommands existed keep working (and are recorded as typed); no study may be named
# like a subcommand (tests/test_architecture.py checks the registry).
SUBCOMMANDS = {
    "run": "run (or resume) a study: arms x seeds, Pass@k table and plots (the default)",
    "report": "render the evidence pages from their committed records",
    "export": "write a study's finished runs as its JSONL records",
}


def cli_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    subcommand, rest = (argv[0], argv[1:]) if argv[:1] and argv[0] in SUBCOMMANDS else ("run", argv)
    if subcommand == "report":
        return report_main(rest)
    if subcommand == "export":
        return export_main(rest)
    return run_main(rest, command="python -m lab study " + shlex.join(argv))


def main() -> int:
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
