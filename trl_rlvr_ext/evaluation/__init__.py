"""Pass@k evaluation: the unbiased estimator, an evaluation loop, a training callback, plots and a CLI.

``pass_at_k`` (numpy only) is imported eagerly; everything that needs torch / transformers is imported on first use.
"""

import importlib

from .metrics import PASS_AT_K_METRIC_PATH
from .pass_at_k import counts_from_correctness, curve_from_counts, default_ks, pass_at_k, pass_at_k_curve


_LAZY = {
    "BoundaryProbeCallback": ".boundary",
    "PassAtKCallback": ".callback",
    "PassAtKResult": ".evaluator",
    "evaluate_pass_at_k": ".evaluator",
    "save_results": ".evaluator",
    "load_results": ".evaluator",
    "plot_pass_at_k": ".plotting",
    "TransformersBackend": ".generation",
    "VLLMBackend": ".generation",
    "resolve_reward_funcs": ".generation",
}

__all__ = [
    "PASS_AT_K_METRIC_PATH",
    "PassAtKCallback",
    "PassAtKResult",
    "TransformersBackend",
    "VLLMBackend",
    "counts_from_correctness",
    "curve_from_counts",
    "default_ks",
    "evaluate_pass_at_k",
    "load_results",
    "pass_at_k",
    "pass_at_k_curve",
    "plot_pass_at_k",
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
