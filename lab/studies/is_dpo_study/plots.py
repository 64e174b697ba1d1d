"""The ``is_dpo`` study's figures and sections of ``results.md``: the frontier plot and the matched-KL comparisons."""

from pathlib import Path

from ..frontier import compare_records, matched_kl_table
from .claims import MATCHED_KL_CLAIMS, MATCHED_KL_GRID
from .design import FRONTIER_SAMPLES


# ---------------------------------------------------------------- table and plot
def _frontier_value(key: str, reduce):
    def value(result: dict) -> float | None:
        values = [entry[key] for entry in result.get("frontier", [])]
        return reduce(values) if values else None

    return value


def plot_frontier(task_name: str, rows: list[dict], out_dir: Path) -> list[str]:
    """``<task>_frontier.png``: held-out greedy accuracy and pass@1 against KL(π_θ || π_ref), one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, arm in enumerate(dict.fromkeys(r["arm"] for r in rows)):
        for n, run in enumerate(r for r in rows if r["arm"] == arm and r.get("frontier")):
            kl = [entry["kl"] for entry in run["frontier"]]
            for ax, key in zip(axes, ("greedy_acc", "pass1")):
                ax.plot(
                    kl,
                    [entry[key] for entry in run["frontier"]],
                    marker=".",
                    alpha=0.7,
                    color=colors[index % len(colors)],
                    label=arm if n == 0 else None,
                )
    for ax, key in zip(axes, ("held-out greedy accuracy", f"held-out pass@1 ({FRONTIER_SAMPLES} samples)")):
        ax.set(xlabel="KL(π_θ || π_ref) (sampled, nats per completion)", ylabel=key)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{task_name}: gold vs KL over training (one line per seed)")
    fig.tight_layout()
    fig.savefig(out_dir / f"{task_name}_frontier.png", dpi=100)
    plt.close(fig)
    pairs = {r["preference_data"]["num_pairs"] for r in rows if r.get("preference_data")}
    return [
        f"![gold vs KL]({task_name}_frontier.png)",
        "",
        f"Preference pairs (shared by every arm and seed): {', '.join(str(p) for p in sorted(pairs))}.",
    ]


def matched_kl_comparisons(rows: list[dict], settings: set) -> list:
    """`MATCHED_KL_CLAIMS` that apply to ``settings`` (the settings of ``rows``, one task's runs), compared at
    `MATCHED_KL_GRID` on the test problems' frontier (`lab.studies.frontier.compare_records`)."""
    claims = [c for c in MATCHED_KL_CLAIMS if not c.settings or settings <= set(c.settings)]
    return compare_records(claims, rows, MATCHED_KL_GRID)


def matched_kl_section(task_name: str, rows: list[dict], out_dir: Path) -> list[str]:
    """The matched-KL comparisons (`MATCHED_KL_CLAIMS` at `MATCHED_KL_GRID`, test problems) of the runs of a
    setting with a validation split, and each early-stopped run's chosen step; nothing for the records' design."""
    if not any(r.get("frontier_validation") for r in rows):
        return []
    lines = ["", f"Matched KL (the test problems' frontier, KL grid {', '.join(map(str, MATCHED_KL_GRID))}):", ""]
    comparisons = matched_kl_comparisons(rows, {r.get("setting") for r in rows})
    lines += [matched_kl_table(comparisons) if comparisons else "(no pair of compared arms ran)", ""]
    stopped = [r for r in rows if r.get("early_stopping")]
    for r in stopped:
        es = r["early_stopping"]
        lines.append(
            f"- {r['arm']} seed {r['seed']}: stopped at step {es['chosen_step']} (validation greedy accuracy "
            f"{es['validation_greedy_acc']:.3f})"
        )
    return lines + ([""] if stopped else [])
