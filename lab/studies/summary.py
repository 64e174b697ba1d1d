"""A study's ``results.md`` and plots, written from its runs' results: the table (mean ± sd over seeds, the chance and
trivial-policy rows), Pass@k and boundary plots, training curves.
"""

import dataclasses
import statistics
import warnings
from pathlib import Path

from trl_rlvr_ext._io import atomic_write

from .design import (
    Study,
    StudySizes,
    train_log_series,
)
from .markdown import mean_sd
from .records import end_probe


def size_flags(study: Study, sizes: StudySizes, quick: bool, setting: str | None = None) -> str:
    """The ``--<size> <value>`` flags that turn the study's default sizes (in ``setting``) into ``sizes``."""
    reference = study.default_sizes(quick, setting)
    changed = [f.name for f in dataclasses.fields(sizes) if getattr(sizes, f.name) != getattr(reference, f.name)]
    return "".join(f" --{name} {getattr(sizes, name)}" for name in changed)


def chance_pass_at_k(dataset: str, num_problems: int, ks: list[int]) -> dict[int, float] | None:
    """Pass@k of guessing: each sample drawn from the train split's answer distribution (``None`` without an
    ``answer`` column). A pass@k near it is guessing, not computing."""
    from trl_rlvr_ext.data import load_named_dataset

    splits = load_named_dataset(dataset)
    if "answer" not in splits["train"].column_names:
        return None
    counts: dict[str, int] = {}
    for answer in splits["train"]["answer"]:
        counts[answer] = counts.get(answer, 0) + 1
    test = splits["test"]["answer"][:num_problems]
    rates = [counts.get(answer, 0) / splits["train"].num_rows for answer in test]
    return {k: statistics.fmean(1 - (1 - q) ** k for q in rates) for k in ks}


def trivial_row(result: dict, ks: list[int], width: int) -> str | None:
    """The table row of the strongest trivial policy of a run's task (`lab.studies.baselines`) on its
    evaluation problems, mean ± sd over guess seeds 0, 1, 2; ``None`` where the task has none."""
    from .baselines import strongest_trivial_pass_at_k

    trivial = strongest_trivial_pass_at_k(
        result["dataset"], result["reward"], len(result["num_correct"]), result["num_samples"]
    )
    if trivial is None:
        return None
    arm, values = trivial
    cells = [f"{arm} (guess from the prompt's structure)", "0,1,2", *[mean_sd(values[k]) for k in ks]]
    return "| " + " | ".join(cells + ["-"] * (width - len(cells))) + " |"


def summarize(study: Study, results: list[dict], out_dir: Path) -> str:
    """Write ``results.md`` (mean ± sd over seeds per task and arm) and the plots; returns the markdown."""
    lines = [f"# Study `{study.name}`", "", study.claim, ""]
    if any(r["quick"] for r in results):
        lines += ["**--quick: a smoke run on untrained tiny models; these numbers mean nothing.**", ""]
    for task_name in dict.fromkeys(r["task"] for r in results):
        rows = [r for r in results if r["task"] == task_name]
        ks = sorted({int(k) for r in rows for k in r["pass_at_k"]})
        shown = [k for k in ks if k == 1 or k == ks[-1] or k in (4, 16, 64)]
        lines += [f"## {task_name}", "", f"Dataset `{rows[0]['dataset']}`, reward `{rows[0]['reward']}`.", ""]
        header = ["arm", "seeds", *[f"pass@{k}" for k in shown]]
        has_boundary = any(r["boundary"] for r in rows)
        if has_boundary:
            header += ["interference_frac (end)", "winner_take_all (end)"]
        header += [c.header for c in study.columns] + ["train s", "wall s"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for arm_name in dict.fromkeys(r["arm"] for r in rows):
            runs = [r for r in rows if r["arm"] == arm_name]
            cells = [arm_name, ",".join(str(r["seed"]) for r in runs)]
            cells += [mean_sd([r["pass_at_k"].get(str(k)) for r in runs]) for k in shown]
            for key in ("interference_frac", "winner_take_all") if has_boundary else ():
                ends = [p.get(f"boundary/{key}") for r in runs if (p := end_probe(r)) is not None]
                cells.append(mean_sd(ends) if ends else "-")
            cells += [mean_sd([c.value(r) for r in runs], c.digits) for c in study.columns]
            cells += [mean_sd([r[key] for r in runs], digits=0) for key in ("train_seconds", "wall_seconds")]
            lines.append("| " + " | ".join(cells) + " |")
        chance = chance_pass_at_k(rows[0]["dataset"], len(rows[0]["num_correct"]), shown)
        if chance is not None:
            cells = ["chance (guess from the train answers)", "-", *[f"{chance[k]:.3f}" for k in shown]]
            lines.append("| " + " | ".join(cells + ["-"] * (len(header) - len(cells))) + " |")
        trivial = trivial_row(rows[0], shown, len(header))
        if trivial:
            lines.append(trivial)
        lines += [""]
        if any(arm in study.arms and not study.arms[arm].train for arm in (r["arm"] for r in rows)):
            lines += [
                "The base arm's spread over seeds is the evaluation noise (its seeds differ only in the sampling seed).",
                "",
            ]
        _plot(task_name, rows, out_dir, has_boundary)
        lines += [f"![Pass@k]({task_name}_pass_at_k.png)"]
        if has_boundary:
            lines += [f"![boundary]({task_name}_boundary.png)"]
        if study.curves:
            _plot_curves(task_name, rows, study.curves, out_dir)
            lines += [f"![training curves]({task_name}_training.png)"]
        for plot in study.plots:
            lines += plot(task_name, rows, out_dir)
        lines += [""]
    lines += ["Commands (each run's own rerun command is in its result.json):", ""]
    lines += [f"    {c}" for c in dict.fromkeys(r["command"] for r in results)]
    markdown = "\n".join(lines) + "\n"
    atomic_write(out_dir / "results.md", markdown)
    return markdown


def _plot(task_name: str, rows: list[dict], out_dir: Path, has_boundary: bool = True) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in arms:
        runs = [r for r in rows if r["arm"] == arm]
        ks = sorted(int(k) for k in runs[0]["pass_at_k"])
        values = np.array([[r["pass_at_k"][str(k)] for k in ks] for r in runs])
        mean, sd = values.mean(axis=0), values.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(len(ks))
        ax.plot(ks, mean, marker="o", label=f"{arm} (n={len(runs)})")
        ax.fill_between(ks, mean - sd, mean + sd, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="k", ylabel="pass@k (held out)", title=f"{task_name}: Pass@k, mean ± sd over seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / f"{task_name}_pass_at_k.png", dpi=120)
    plt.close(fig)
    if not has_boundary:
        return

    keys = ["mean_logp_correct", "interference_frac", "winner_take_all", "delta_q1", "delta_q5"]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.5))
    for arm in arms:
        runs = [r for r in rows if r["arm"] == arm and r["boundary"]]
        if not runs:
            continue
        # seeds of an arm that matches another run's budget stop at different steps, so their probes differ: the
        # union of the steps, NaN where a seed has no probe
        steps = sorted({b["step"] for r in runs for b in r["boundary"]})
        for ax, key in zip(axes, keys):
            by_step = [{b["step"]: b.get(f"boundary/{key}", np.nan) for b in r["boundary"]} for r in runs]
            values = np.array([[probes.get(step, np.nan) for step in steps] for probes in by_step], dtype=float)
            with warnings.catch_warnings():  # winner_take_all is NaN at step 0 (no change yet): an empty mean is NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=0)
            ax.plot(steps, mean, marker=".", label=arm)
    for ax, key in zip(axes, keys):
        ax.set(title=key, xlabel="step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{task_name}: probe log-likelihood of correct held-out solutions (mean over seeds)")
    fig.tight_layout()
    fig.savefig(out_dir / f"{task_name}_boundary.png", dpi=100)
    plt.close(fig)


def _plot_curves(task_name: str, rows: list[dict], keys: list[str], out_dir: Path) -> None:
    """Training-log ``keys`` over steps, one line per arm (mean over seeds), one panel per key."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.5), squeeze=False)
    for arm in dict.fromkeys(r["arm"] for r in rows):
        runs = [r for r in rows if r["arm"] == arm and r.get("train_log")]
        for ax, key in zip(axes[0], keys):
            series = [dict(train_log_series(r, key)) for r in runs]
            steps = sorted(set().union(*series)) if series else []
            if not steps:
                continue
            with warnings.catch_warnings():  # a step some seed did not log is NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean([[s.get(step, np.nan) for step in steps] for s in series], axis=0)
            ax.plot(steps, mean, marker=".", label=arm)
    for ax, key in zip(axes[0], keys):
        ax.set(title=key, xlabel="step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.suptitle(f"{task_name}: training metrics (mean over seeds)")
    fig.tight_layout()
    fig.savefig(out_dir / f"{task_name}_training.png", dpi=100)
    plt.close(fig)
