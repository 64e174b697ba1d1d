"""Pass@k evaluation: unbiased pass@k, pass^k and maj@k with bootstrap intervals, an evaluation loop, a training
callback, plots and a CLI.

``pass_at_k`` (numpy only) is imported eagerly; everything that needs torch / transformers is imported on first use.
"""

import importlib

from .estimators import (
    answer_classes,
    bootstrap_intervals,
    counts_from_correctness,
    curve_from_counts,
    default_ks,
    maj_at_k,
    pass_at_k,
    pass_at_k_curve,
    pass_hat_k,
    pass_metrics,
)
from .metrics import PASS_AT_K_METRIC_PATH


_LAZY = {
    "BoundaryProbeCallback": ".boundary",
    "PassAtKCallback": ".callback",
    "PassAtKResult": ".evaluator",
    "evaluate_pass_at_k": ".evaluator",
    "save_results": ".evaluator",
    "load_results": ".evaluator",
    "plot_pass_at_k": ".plotting",
    "TransformersBackend": "..sampling",
    "TrainerVLLMBackend": "..sampling",
    "resolve_answer_extractor": ".answers",
    "VLLMBackend": "..sampling",
    "resolve_reward_funcs": ".generation",
}

__all__ = [
    "PASS_AT_K_METRIC_PATH",
    "BoundaryProbeCallback",
    "PassAtKCallback",
    "PassAtKResult",
    "TrainerVLLMBackend",
    "TransformersBackend",
    "VLLMBackend",
    "answer_classes",
    "bootstrap_intervals",
    "counts_from_correctness",
    "curve_from_counts",
    "default_ks",
    "evaluate_pass_at_k",
    "load_results",
    "maj_at_k",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_hat_k",
    "pass_metrics",
    "plot_pass_at_k",
    "resolve_answer_extractor",
    "resolve_reward_funcs",
    "save_results",
]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
