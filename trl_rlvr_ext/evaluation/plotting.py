"""Pass@k curves on one plot (matplotlib, imported lazily with the non-interactive Agg backend)."""

import os
from collections.abc import Mapping, Sequence


_METRICS = {"pass@": "pass_at_k", "pass^": "pass_hat_k", "maj@": "maj_at_k"}


def plot_pass_at_k(curves, path: str, title: str | None = None, metric: str = "pass@") -> str:
    """Plot pass@k (or pass^k, maj@k) against k (log2 axis) for several models or checkpoints and save it to ``path``
    (PNG). A `PassAtKResult` that carries confidence intervals for the plotted metric is drawn with a shaded band.

    Args:
        curves: `PassAtKResult`s, or a mapping ``label -> {k: value}`` (no bands).
        path: the image file to write (its folder is created).
        title: the plot title.
        metric: ``"pass@"``, ``"pass^"`` or ``"maj@"`` (results without maj@k are skipped for ``"maj@"``).

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

    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {sorted(_METRICS)}, got {metric!r}.")
    bands: dict[str, dict[int, tuple[float, float]]] = {}
    results = []
    if not isinstance(curves, Mapping):
        results = [r for r in _as_list(curves) if getattr(r, _METRICS[metric]) is not None]
        curves = {result.label: getattr(result, _METRICS[metric]) for result in results}
        for result in results:
            band = {k: result.intervals.get(f"{metric}{k}") for k in curves[result.label]}
            if band and all(v is not None for v in band.values()):
                bands[result.label] = band
    if not curves or not any(curves.values()):
        raise ValueError(f"There is no {metric}k curve to plot.")
    fig, ax = plt.subplots(figsize=(6, 4))
    try:
        all_ks = set()
        for label, curve in curves.items():
            ks = sorted(int(k) for k in curve)
            all_ks.update(ks)
            (line,) = ax.plot(ks, [curve[k] for k in ks], marker="o", label=str(label))
            if label in bands:  # the bootstrap confidence interval of each point, as a band in the line's colour
                low = [bands[label][k][0] for k in ks]
                high = [bands[label][k][1] for k in ks]
                ax.fill_between(ks, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_ks))
        ax.set_xticklabels([str(k) for k in sorted(all_ks)])
        ax.set_xlabel("k (samples)")
        ax.set_ylabel(f"{metric}k")  # fractions, as the API, the JSON and the docs' tables hold them
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        level = next((r.config.get("confidence_level") for r in results if r.label in bands), None)
        default_title = f"{metric}k" + (f" ({100 * level:g}% bootstrap intervals)" if level else "")
        ax.set_title(title or default_title)
        ax.legend(loc="lower right", fontsize="small")
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def _as_list(results) -> Sequence:
    return list(results) if isinstance(results, (list, tuple)) else [results]
