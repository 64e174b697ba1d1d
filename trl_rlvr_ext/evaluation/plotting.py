"""Pass@k curves on one plot (matplotlib, imported lazily with the non-interactive Agg backend)."""

import os
from collections.abc import Mapping, Sequence


def plot_pass_at_k(curves, path: str, title: str | None = None) -> str:
    """Plot pass@k against k (log2 axis) for several models or checkpoints and save it to ``path`` (PNG).

    Args:
        curves: `PassAtKResult`s, or a mapping ``label -> {k: pass@k}``.
        path: the image file to write (its folder is created).
        title: the plot title.

    Returns:
        ``path``.
    """
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            'Plotting pass@k needs matplotlib: `pip install "matplotlib>=3.8"` (from a clone of trl-rlvr-ext: '
            '`pip install -e ".[plot]"`), or write the JSON only.'
        ) from error
    matplotlib.use("Agg")  # no display needed; safe on servers and in tests
    import matplotlib.pyplot as plt

    if not isinstance(curves, Mapping):
        curves = {result.label: result.pass_at_k for result in _as_list(curves)}
    if not curves:
        raise ValueError("There is no pass@k curve to plot.")
    fig, ax = plt.subplots(figsize=(6, 4))
    try:
        all_ks = set()
        for label, curve in curves.items():
            ks = sorted(int(k) for k in curve)
            all_ks.update(ks)
            ax.plot(ks, [100.0 * curve[k] for k in ks], marker="o", label=str(label))
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_ks))
        ax.set_xticklabels([str(k) for k in sorted(all_ks)])
        ax.set_xlabel("k (samples)")
        ax.set_ylabel("pass@k (%)")
        ax.set_ylim(0, 100)
        ax.grid(True, alpha=0.3)
        ax.set_title(title or "Pass@k")
        ax.legend(loc="lower right", fontsize="small")
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def _as_list(results) -> Sequence:
    return list(results) if isinstance(results, (list, tuple)) else [results]
