"""RELEX (https://arxiv.org/abs/2605.21468): record a run's checkpoint trajectory, fit its rank-r subspace per tensor,
and write extrapolated checkpoints.

- `relex`: the pure maths (subspace, linear fit, extrapolate / reconstruct / fit_reconstruct).
- `trajectory`: the trajectory folder (θ_0, the deltas, the manifest) and streamed safetensors reading and writing.
- `fit`: `relex_trajectory`, the streamed fit of a whole trajectory (``trl-rlvr-ext relex``).
- `callback`: `RELEXTrajectoryCallback`, the recorder (``relex_record_steps`` in `RLVRGRPOConfig`).
"""

from .fit import relex_trajectory
from .relex import (
    AUTHORS_STEP_SCALING,
    RELEX_MODES,
    RELEX_PAPER_SETTINGS,
    RelexSubspace,
    relex_extrapolate,
    relex_fit_reconstruct,
    relex_linear_fit,
    relex_reconstruct,
    relex_subspace,
)


__all__ = [
    "AUTHORS_STEP_SCALING",
    "RELEX_MODES",
    "RELEX_PAPER_SETTINGS",
    "RelexSubspace",
    "relex_extrapolate",
    "relex_fit_reconstruct",
    "relex_linear_fit",
    "relex_reconstruct",
    "relex_subspace",
    "relex_trajectory",
]
