"""pytest plugin of the TRL matrix (``-p cpu_fused_head``): TRL 1.15's fused LM head on machines without Triton.

TRL 1.15.0 always runs its fused LM head (GRPO and DPO alike), whose autograd function is Triton-only: on a CPU-only
machine both stock TRL and our trainers fail with ``'NoneType' object has no attribute 'apply'``. TRL 1.16.0 ships the
same autograd function (same arguments, same outputs) with a PyTorch fallback. This plugin loads that file from the
main environment's TRL 1.16 (the matrix venv sees it behind its own TRL 1.15) and plugs it into TRL 1.15, for stock TRL
and our trainers alike: the equivalence tests then still compare our code with TRL 1.15's trainer code, on a numerical
kernel shared by both. It changes nothing where the kernel is available, nor on TRL releases without a fused head.
"""

import importlib.util
import sys
from pathlib import Path

import trl
import trl.trainer.utils as trl_utils


def _torch_chunked_logprob_function():
    here = Path(trl.__file__).resolve().parent
    for entry in sys.path:
        candidate = Path(entry) / "trl" / "kernels" / "chunked_logprob.py"
        if not candidate.is_file() or candidate.resolve().parents[1] == here:
            continue
        if "is_triton_available" not in candidate.read_text():  # a release without the PyTorch fallback
            continue
        spec = importlib.util.spec_from_file_location("trl.kernels._matrix_chunked_logprob", candidate)
        module = importlib.util.module_from_spec(spec)
        module.__package__ = "trl.kernels"  # its backward imports `..trainer.utils` (TRL 1.15's, which has it)
        spec.loader.exec_module(module)
        return module.ChunkedLogProbFunction
    raise RuntimeError(
        f"TRL {trl.__version__} has no CPU fused LM head and no TRL >= 1.16 with a PyTorch fallback is on sys.path: "
        "run the matrix from the main environment (tests/trl_matrix/run.sh), or on a machine with Triton and a GPU."
    )


if "_ChunkedLogProbFunction" in vars(trl_utils) and trl_utils._ChunkedLogProbFunction is None:
    trl_utils._ChunkedLogProbFunction = _torch_chunked_logprob_function()
