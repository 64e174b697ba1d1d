"""``python -m lab baselines``: the trivial-policy baselines of studies' evaluation sets, as JSONL records.

    python -m lab baselines --records docs/evidence/data --out docs/evidence/data/trivial.jsonl
    python -m lab baselines --records outputs/studies/self --out outputs/studies/self/trivial.jsonl

Reads study records (``*.jsonl`` files, or folders searched for them and for runs' ``result.json``), finds each
distinct evaluation set (task, dataset, problems, samples per problem), and writes one record per (trivial policy,
seed) on exactly those problems (`lab.studies.baselines`).
"""

import argparse
import json
import shlex
import sys
from pathlib import Path


# The studies whose evaluation sets get trivial baselines by default: those whose pages show them beside the arms or
# whose claims compare with them (the pretrained study's claim 10 reads the strongest one at pass@32).
STUDIES = ("self", "nsr", "is_dpo", "lora_init", "pretrained")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lab baselines",
        description="Trivial-policy baselines (guesses from the prompt's structure) on the evaluation sets of study "
        "records, graded by each task's reward, in the studies' record schema.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--records",
        default="docs/evidence/data",
        help="Comma-separated study records: .jsonl(.gz) files, or folders searched for them and result.json.",
    )
    parser.add_argument(
        "--studies",
        default=",".join(STUDIES),
        help="Comma-separated studies whose evaluation sets get baselines (records of other studies are ignored).",
    )
    parser.add_argument("--seeds", default="0,1,2", help="Comma-separated seeds of the policies' guesses.")
    parser.add_argument("--out", default="docs/evidence/data/trivial.jsonl", help="The JSONL file to write.")
    return parser


def read_records(paths: list[str]) -> list[dict]:
    """The records in ``paths``: JSONL files (one record a line, ``.jsonl.gz`` compressed), or folders holding them or
    runs' result.json."""
    from ..studies.records import read_records_text

    records = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"No such records file or folder: {str(path)!r}.")
        patterns = ("*.jsonl", "*.jsonl.gz", "result.json")
        files = [f for pattern in patterns for f in sorted(path.rglob(pattern))] if path.is_dir() else [path]
        for file in files:
            if file.name == "result.json":
                records.append(json.loads(file.read_text()))
            else:  # a records file, gzip-compressed or not (lab.studies.records)
                records += [json.loads(line) for line in read_records_text(file).splitlines() if line.strip()]
    return records


def cli_main(argv: list[str] | None = None) -> int:
    from ..studies.baselines import baseline_records, study_evaluation_sets

    argv = list(sys.argv[1:] if argv is None else argv)
    args = make_parser().parse_args(argv)
    try:
        seeds = [int(seed) for seed in args.seeds.split(",") if seed]
    except ValueError:
        raise SystemExit(
            f"python -m lab baselines: --seeds must be comma-separated integers, got {args.seeds!r}."
        ) from None
    out = Path(args.out).resolve()
    records = [r for r in read_records(args.records.split(",")) if r.get("study") != "trivial"]
    sets = study_evaluation_sets(records, studies=set(args.studies.split(",")))
    if not sets:
        raise SystemExit(
            f"python -m lab baselines: no records of the studies {args.studies} in {args.records} (--quick runs are "
            "left out: their numbers mean nothing)."
        )
    command = "python -m lab baselines " + shlex.join(argv)
    lines = []
    for evaluation_set in sets:
        made = baseline_records(
            evaluation_set["task"],
            evaluation_set["dataset"],
            evaluation_set["reward"],
            evaluation_set["eval_problems"],
            evaluation_set["num_samples"],
            seeds=seeds,
            studies=evaluation_set["studies"],
            command=command,
        )
        print(
            f"{evaluation_set['task']} ({evaluation_set['eval_problems']} problems x {evaluation_set['num_samples']} "
            f"samples, {', '.join(evaluation_set['studies'])}): {len(made)} records"
        )
        lines += [json.dumps(record, separators=(",", ":")) for record in made]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} records to {out}")
    return 0


def main() -> int:
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
