r"""``python -m lab screen``: which tasks a model can learn on, screened by a declared rule, recorded and rendered.

    python -m lab screen --model smollm2-135m-instruct                    # every declared candidate, then the page
    python -m lab screen --model smollm2-135m-instruct --candidates 0,1   # a subset (two processes side by side)
    python -m lab screen --render                                         # only re-render the page from the records

A task is in the **learnable regime** of a base model when GRPO can find signal and a gain can mean more than
guessing (`LEARNABLE_RULE`, declared before any run):

- the base's held-out pass@1 is within ``[0.05, 0.60]``: below, almost every group of rollouts is all-wrong (no
  advantage, no gradient); above, little is left to learn;
- the strongest trivial policy of the task (`lab.studies.baselines`, graded by the same reward and answer
  format, the highest of its policies at each k, mean over 3 seeds) has pass@K at most half the base's at the largest
  k studied ``K``: at large k a guesser that reads the prompt's structure can reach any small answer space, so the
  base's pass@K is only evidence of reasoning where guessing stays far below.

Each candidate (`CANDIDATES`: a ``reasoning_gym:`` name with the chat format and an answer format) is sampled on the
first ``--eval_problems`` held-out problems; one record per (candidate, model, sampling settings) is appended to
``--records`` as soon as it is done, and a candidate already recorded with those settings is skipped, so an
interrupted screening resumes. The page (``--page``) is rendered from the records alone. The screening measures the
base model, not a method: no method comparison is selected on it. It does read the held-out problems, though, so a
study judged on the same problems with a task chosen here declares that choice (`PageSetting.selected_on_test`,
`lab.studies.tasks.REAL_MODEL_SELECTION`), and its claims are exploratory.
"""

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from trl_rlvr_ext.scripts.common import HelpFormatter


PROG = "python -m lab screen"
RECORDS = "docs/evidence/data/screening.jsonl"
PAGE = "docs/evidence/screening.md"
# The candidates, declared before their runs. One-digit products and two-term one-digit sums: the model's probes put
# them near the regime; both have trivial policies. The answer formats are the lenient ones, as the model writes no
# <answer> tags (under the strict format it scores 0).
_PRODUCTS = "reasoning_gym:products?min_digits=1&max_digits=1&size=16&test_size=32&dedup=near&format=chat"
_CHAIN_SUM = (
    "reasoning_gym:chain_sum?min_terms=2&max_terms=2&min_digits=1&max_digits=1&size=64&test_size=32&dedup=near"
    "&format=chat"
)
# Declared on 2026-12-05, before their runs, for SELF's boundary claims (issue "Evidence v3", part 3b): candidate 0,
# the one learnable task, sits at the ceiling at the largest k (base pass@32 about 1), so there is no boundary to
# shrink. These two are harder variants of it, in the same format, that may leave room at large k: three one-digit
# factors, and two factors of one or two digits (each problem draws its digit count).
_PRODUCTS_HARDER = "reasoning_gym:products?{}&size=64&test_size=32&dedup=near&format=chat&answer=last_number"
CANDIDATES = (
    _PRODUCTS + "&answer=last_number",
    _PRODUCTS + "&answer=first_number",
    _CHAIN_SUM + "&answer=last_number",
    _CHAIN_SUM + "&answer=first_number",
    _PRODUCTS_HARDER.format("min_terms=3&max_terms=3&min_digits=1&max_digits=1"),
    _PRODUCTS_HARDER.format("min_terms=2&max_terms=2&min_digits=1&max_digits=2"),
)
PASS_AT_1_RANGE = (0.05, 0.60)
TRIVIAL_SHARE = 0.5
LEARNABLE_RULE = (
    f"learnable when {PASS_AT_1_RANGE[0]:.2f} <= base pass@1 <= {PASS_AT_1_RANGE[1]:.2f} and the strongest trivial "
    f"policy's pass@K <= {TRIVIAL_SHARE} x the base's pass@K, K the largest k"
)
TRIVIAL_SEEDS = (0, 1, 2)


def screening_verdict(record: dict) -> tuple[str, str]:
    """``(verdict, reason)`` of one screening record under `LEARNABLE_RULE`: ``"learnable"``, ``"too hard"``,
    ``"too easy"``, ``"guessable"`` (the trivial policy comes within the declared share of the base at the largest k)
    or ``"no trivial policy"`` (the rule cannot be applied)."""
    base = {int(k): v for k, v in record["pass_at_k"].items()}
    largest = max(base)
    low, high = PASS_AT_1_RANGE
    if base[1] < low:
        return "too hard", f"pass@1 {base[1]:.3f} < {low:.2f}"
    if base[1] > high:
        return "too easy", f"pass@1 {base[1]:.3f} > {high:.2f}"
    trivial = strongest_trivial(record)
    if trivial is None:
        return "no trivial policy", "the task has no trivial policy to compare with"
    if trivial[largest] > TRIVIAL_SHARE * base[largest]:
        return "guessable", f"trivial pass@{largest} {trivial[largest]:.3f} > {TRIVIAL_SHARE} x {base[largest]:.3f}"
    return "learnable", f"trivial pass@{largest} {trivial[largest]:.3f} <= {TRIVIAL_SHARE} x {base[largest]:.3f}"


def strongest_trivial(record: dict) -> dict[int, float] | None:
    """The highest mean pass@k over the record's trivial policies at each k (``None`` when it has none)."""
    policies = record.get("trivial") or {}
    if not policies:
        return None
    ks = [int(k) for k in record["pass_at_k"]]
    return {k: max(policy["pass_at_k"][str(k)] for policy in policies.values()) for k in ks}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n")[0].split(": ", 1)[1], formatter_class=HelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct", help="The base model (a path or a registry name).")
    parser.add_argument(
        "--candidates",
        default="all",
        help=f"Comma-separated indices of the declared candidates to run (0-{len(CANDIDATES) - 1}), or 'all'.",
    )
    parser.add_argument("--eval_problems", type=int, default=32, help="Held-out problems per candidate.")
    parser.add_argument("--num_samples", type=int, default=16, help="Samples per problem (the largest k).")
    parser.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature.")
    parser.add_argument("--top_p", type=float, default=1.0, help="Nucleus sampling mass (1.0: off).")
    parser.add_argument("--max_new_tokens", type=int, default=24, help="Generation budget per sample.")
    parser.add_argument("--seed", type=int, default=0, help="Sampling seed.")
    parser.add_argument("--batch_size", type=int, default=128, help="Sequences per generate call.")
    parser.add_argument("--num_threads", type=int, default=1, help="torch threads (run two processes on 2 cores).")
    parser.add_argument("--records", default=RECORDS, help="The JSONL records file (appended to, read to resume).")
    parser.add_argument("--page", default=PAGE, help="The page rendered from the records.")
    parser.add_argument("--render", action="store_true", help="Only render the page from the records.")
    return parser


def _settings(args: argparse.Namespace) -> dict:
    keys = ("eval_problems", "num_samples", "temperature", "top_p", "max_new_tokens", "seed")
    return {key: getattr(args, key) for key in keys}


def read_screening_records(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def screen_candidate(dataset_name: str, model, tokenizer, model_name: str, settings: dict) -> dict:
    """The screening record of one candidate: the base's per-problem counts and pass@k (with 95 % intervals over
    problems), and each trivial policy's mean pass@k over `TRIVIAL_SEEDS`, on the same problems and reward."""
    from trl_rlvr_ext.evaluation import evaluate_pass_at_k
    from trl_rlvr_ext.evaluation.estimators import pass_at_k_curve
    from trl_rlvr_ext.rewards import get_reward_func
    from trl_rlvr_ext.sampling import SamplingSettings

    from ..studies import baselines

    rows = baselines.eval_rows(dataset_name, settings["eval_problems"])
    reward = get_reward_func("reasoning_gym")
    start = time.perf_counter()
    result = evaluate_pass_at_k(
        model,
        rows,
        reward,
        tokenizer=tokenizer,
        sampling=SamplingSettings(
            num_samples=settings["num_samples"],
            temperature=settings["temperature"],
            top_p=settings["top_p"],
            max_new_tokens=settings["max_new_tokens"],
            seed=settings["seed"],
        ),
        batch_size=settings["batch_size"],
        label=model_name,
    )
    seconds = time.perf_counter() - start
    tasks = list(dict.fromkeys(baselines.row_task(row, dataset_name) for row in rows))
    trivial = {}
    for name in baselines.policy_names(tasks):
        curves = []
        for seed in TRIVIAL_SEEDS:
            counts, _ = baselines.evaluate_trivial_policy(
                rows, dataset_name, reward, name, settings["num_samples"], seed
            )
            curves.append(pass_at_k_curve([settings["num_samples"]] * len(rows), counts))
        trivial[name] = {"pass_at_k": {str(k): sum(c[k] for c in curves) / len(curves) for k in curves[0]}}
    return {
        "study": "screening",
        "dataset": dataset_name,
        "task": "+".join(tasks),
        "base_model": model_name,
        "settings": {key: settings[key] for key in sorted(settings) if key != "batch_size"},
        "num_correct": [int(c) for c in result.num_correct],
        "pass_at_k": {str(k): float(v) for k, v in result.pass_at_k.items()},
        "intervals": {
            key: [float(lo), float(hi)] for key, (lo, hi) in result.intervals.items() if key.startswith("pass@")
        },
        "trivial": trivial,
        "generate_seconds": round(seconds, 1),
    }


def _key(record: dict) -> tuple:
    return (record["dataset"], record["base_model"], json.dumps(record["settings"], sort_keys=True))


def _order(record: dict) -> tuple:
    declared = CANDIDATES.index(record["dataset"]) if record["dataset"] in CANDIDATES else len(CANDIDATES)
    return (declared, record["dataset"], record["base_model"], json.dumps(record["settings"], sort_keys=True))


def render_page(records: list[dict]) -> str:
    """The screening page: one row per record in the declared candidates' order (task settings, base pass@1 and
    pass@K with intervals, the strongest trivial pass@K, problems, verdict), then each record's command."""
    records = sorted(records, key=_order)
    lines = [
        "# Task screening: where the real model can learn",
        "",
        "Generated by `python -m lab screen --render` from `docs/evidence/data/screening.jsonl`; do not edit.",
        "",
        (
            f"Rule, declared before the runs: {LEARNABLE_RULE}. The trivial policies guess from the prompt's "
            "structure (see the trivial baselines on the evidence index), graded by the same reward and answer "
            "format; the strongest is the highest of them at each k (mean over 3 seeds). Intervals: 95 % percentile "
            "bootstrap over problems."
        ),
        "",
        "| # | dataset | model | problems x samples | base pass@1 | base pass@K | strongest trivial pass@K | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, record in enumerate(records):
        ks = sorted(int(k) for k in record["pass_at_k"])
        largest = ks[-1]
        intervals = record.get("intervals", {})

        def cell(k, record=record, intervals=intervals):
            low, high = intervals.get(f"pass@{k}", (float("nan"), float("nan")))
            return f"{record['pass_at_k'][str(k)]:.3f} [{low:.3f}, {high:.3f}]"

        trivial = strongest_trivial(record)
        trivial_cell = "none" if trivial is None else f"{trivial[largest]:.3f}"
        verdict, reason = screening_verdict(record)
        settings = record["settings"]
        lines.append(
            f"| {i} | `{record['dataset']}` | {record['base_model']} | {settings['eval_problems']} x "
            f"{settings['num_samples']} | {cell(1)} | {cell(largest)} (K={largest}) | {trivial_cell} | "
            f"**{verdict}** ({reason}) |"
        )
    lines += ["", "## Per trivial policy (pass@K, mean over 3 seeds)", ""]
    for i, record in enumerate(records):
        largest = max(int(k) for k in record["pass_at_k"])
        policies = ", ".join(
            f"{name} {policy['pass_at_k'][str(largest)]:.3f}" for name, policy in (record.get("trivial") or {}).items()
        )
        lines.append(f"- {i}: {policies or 'none'}")
    lines += ["", "## Commands and provenance", ""]
    for i, record in enumerate(records):
        provenance = record.get("provenance", {})
        settings = ", ".join(f"{key}={value}" for key, value in record["settings"].items())
        lines.append(
            f"- {i}: `{record.get('command', '')}` ({settings}; generation {record.get('generate_seconds')} s on "
            f"{provenance.get('num_threads')} thread(s); commit {str(provenance.get('commit'))[:12]}, "
            f"{provenance.get('time')}; weights sha256 {str(provenance.get('weights_sha256'))[:12]})"
        )
    return "\n".join(lines) + "\n"


def _candidate_indices(text: str) -> list[int]:
    if text == "all":
        return list(range(len(CANDIDATES)))
    try:
        indices = [int(part) for part in text.split(",") if part]
    except ValueError:
        indices = []
    if not indices or any(not 0 <= i < len(CANDIDATES) for i in indices):
        raise ValueError(
            f"--candidates {text!r}: give 'all' or comma-separated indices from 0 to {len(CANDIDATES) - 1} of the "
            "declared candidates (see lab.scripts.screen_tasks.CANDIDATES)."
        )
    return indices


def cli_main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.render:
        records = read_screening_records(args.records)
        Path(args.page).write_text(render_page(records))
        print(f"Rendered {len(records)} records to {args.page}.")
        return 0
    indices = _candidate_indices(args.candidates)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.num_threads))
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_rlvr_ext.data import resolve_model_name_or_path
    from trl_rlvr_ext.provenance import provenance

    torch.set_num_threads(args.num_threads)
    settings = {**_settings(args), "batch_size": args.batch_size}
    done = {_key(r) for r in read_screening_records(args.records)}
    model_path = resolve_model_name_or_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    command = "python -m lab screen " + shlex.join(sys.argv[1:] if argv is None else argv)
    for i in tqdm(indices, desc="screening", unit="task"):
        name = CANDIDATES[i]
        key = (name, args.model, json.dumps(_settings(args), sort_keys=True))
        if key in done:
            print(f"[{i}] already in {args.records}: skipped.")
            continue
        record = screen_candidate(name, model, tokenizer, args.model, settings)
        record["command"] = command
        record["provenance"] = provenance(model_path, args.num_threads)
        Path(args.records).parent.mkdir(parents=True, exist_ok=True)
        with open(args.records, "a") as handle:  # one line per candidate: an interrupted screening resumes
            handle.write(json.dumps(record, sort_keys=True) + "\n")
        verdict, reason = screening_verdict(record)
        print(f"[{i}] {name}: pass@1 {record['pass_at_k']['1']:.3f}, {verdict} ({reason})", flush=True)
    records = read_screening_records(args.records)
    Path(args.page).write_text(render_page(records))
    print(f"Rendered {len(records)} records to {args.page}.")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
