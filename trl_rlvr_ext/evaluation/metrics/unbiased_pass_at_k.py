"""Unbiased pass@k as an `evaluate` metric, for users of the `evaluate` library.

Load it offline from the installed package (no hub access):

    import evaluate
    from trl_rlvr_ext.evaluation import PASS_AT_K_METRIC_PATH

    metric = evaluate.load(PASS_AT_K_METRIC_PATH)
    metric.compute(predictions=[[True, False, False, True], [False, False, False, False]], k=[1, 2, 4])

Each prediction is the list of per-sample correctness flags of one problem (its length is that problem's n). The
estimate is `trl_rlvr_ext.evaluation.estimators`, the numpy core; this module only adapts it to `evaluate`.
"""

# One import per line: evaluate's dependency scanner cannot parse "import a, b".
import datasets
import evaluate
import numpy as np

from trl_rlvr_ext.evaluation.estimators import counts_from_correctness, default_ks
from trl_rlvr_ext.evaluation.estimators import pass_at_k as _pass_at_k


_CITATION = """\
@article{chen2021codex,
  title={Evaluating Large Language Models Trained on Code},
  author={Mark Chen and others},
  journal={arXiv preprint arXiv:2107.03374},
  year={2021}
}
"""

_DESCRIPTION = """\
Unbiased pass@k (Chen et al. 2021): for a problem with n samples of which c are correct,
pass@k = 1 - C(n - c, k) / C(n, k), computed as 1 - prod_{i=n-c+1}^{n} (1 - k / i), averaged over problems.
k larger than a problem's n is an error.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one list of booleans per problem (the correctness of each of its samples).
    k: an int or a list of ints (default: 1, 2, 4, ..., n of the smallest problem).
Returns:
    a dict {"pass@k": mean over problems} for each k.
Examples:
    >>> metric = evaluate.load(PASS_AT_K_METRIC_PATH)
    >>> metric.compute(predictions=[[True, False], [False, False]], k=[1, 2])
    {'pass@1': 0.25, 'pass@2': 0.5}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PassAtK(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Sequence(datasets.Value("bool"))}),
            reference_urls=["https://huggingface.co/papers/2107.03374"],
        )

    def _compute(self, predictions, k=None):
        n, c = counts_from_correctness(predictions)
        if len(n) == 0:
            raise ValueError("pass@k needs at least one problem.")
        ks = default_ks(int(n.min())) if k is None else ([k] if isinstance(k, int) else list(k))
        return {f"pass@{kk}": float(np.mean(_pass_at_k(n, c, int(kk)))) for kk in ks}
