r"""RELEX's maths (REinforcement Learning EXtrapolation, https://arxiv.org/abs/2605.21468, code
https://github.com/weizhepei/RELEX): pure functions of tensors, one tensor's trajectory at a time.

For one state-dict tensor with history steps s_1 < … < s_T, the rows of M ∈ R^{T×d} are the flattened cumulative
deltas θ_{s_t} − θ_0. RELEX keeps its top-r right singular directions and fits a line through their coefficients:

    G = M Mᵀ = U Λ Uᵀ   (eigenvalues descending)        explained = Σ_{k≤r} max(λ_k, 0) / Σ_k max(λ_k, 0)
    S_k = √max(λ_k, 0),   V_k = Mᵀ U_k / S_k   (V_k = 0 when S_k ≤ 10⁻⁶·S_1)        C = M V ∈ R^{T×r}
    c_k(τ) = a_k τ + b_k   (OLS with intercept on the last W rows of C, τ = 0 … W − 1)
    Δ̂(s*) = V (a τ* + b),   τ* = (W − 1) + (round(s*·scaling) − s_T) / h,   θ̂(s*) = θ_0 + Δ̂(s*)

h is the spacing of the history steps (1 in the authors' trajectories, which hold every step; the authors' τ* is
this one with h = 1). `scaling` maps a target label to the fit axis: the authors' script infers 2.0 for
Qwen2.5-Math-1.5B (see `AUTHORS_STEP_SCALING`); here it is always an explicit argument.

Only the linear fit, made once, is built. The authors' script also fits a polynomial (``--fit_method polynomial``), a
sinusoid (``sin_fft``) and re-fits autoregressively (``--future_extrapolation_window``): none of these is built here
(docs/methods/relex.md says what each does).

Every tensor is treated alone: no cross-tensor or per-layer coupling. The Gram is float32 (the authors' float32
arrays), its eigendecomposition float64 (numpy's ``eigh`` computes a float32 input in float64), the fit float64.
"""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch


RELEX_MODES = ("extrapolate", "reconstruct", "fit_reconstruct")
# The paper's method: rank 1, a linear fit over the whole history, labels on the fit axis as they are.
RELEX_PAPER_SETTINGS = {"rank": 1, "window": -1, "step_scaling": 1.0, "mode": "extrapolate"}
# What the authors' script (scripts/svd_extrapolation.py) infers for --target_step_scaling_factor when it is unset:
# 2.0 when "Qwen2.5-Math-1.5B" is in --base_model (its comment: that trajectory saved one checkpoint per 2 optimizer
# steps, so the paper's "step 500" is fit-axis index 1000), else 1.0. Documented here, never inferred from a name.
AUTHORS_STEP_SCALING = {"Qwen2.5-Math-1.5B": 2.0}
# V_k is dropped (set to 0) when S_k <= this times S_1 (the authors' threshold; 1e-12 when S_1 = 0)
SINGULAR_VALUE_CUTOFF = 1e-6


@dataclass(frozen=True)
class RelexSubspace:
    """The top-r subspace of one tensor's history.

    Attributes:
        V: (d, r) right singular vectors (directions in the flattened tensor), float32.
        S: (r,) singular values, descending, float32.
        U: (T, r) left singular vectors, float32; ``U * S`` are the history's coefficients.
        explained: share of Σ max(λ, 0) in the top r eigenvalues (0.0 when the history has no variance).
        eigenvalues: (T,) all eigenvalues of the Gram, descending, float64 (for the report's singular values).
    """

    V: torch.Tensor
    S: torch.Tensor
    U: torch.Tensor
    explained: float
    eigenvalues: torch.Tensor

    @property
    def rank(self) -> int:
        return self.S.numel()


def relex_subspace(deltas: torch.Tensor, rank: int) -> RelexSubspace:
    """The top-``rank`` right singular subspace of ``deltas`` (T, d) through its T×T Gram (T ≪ d).

    The rank is capped at T. A direction whose singular value is at most 10⁻⁶ of the first is set to 0, as the
    authors do, so a tensor that never moved predicts a zero delta.
    """
    if deltas.dim() != 2:
        raise ValueError(f"deltas must be a (T, d) matrix of flattened deltas, got shape {tuple(deltas.shape)}.")
    if deltas.shape[0] < 1:
        raise ValueError("deltas has no row: the history holds no step.")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be an integer >= 1, got {rank!r} (paper: 1).")
    M = deltas.float()
    r = min(rank, M.shape[0])
    gram = M @ M.T
    eigenvalues, eigenvectors = torch.linalg.eigh(gram.double())
    order = torch.argsort(eigenvalues, descending=True)
    eigenvalues, eigenvectors = eigenvalues[order], eigenvectors[:, order]
    positive = eigenvalues.clamp(min=0)
    total = float(positive.sum())
    explained = float(positive[:r].sum()) / total if total > 0 else 0.0
    S = positive[:r].sqrt().float()
    U = eigenvectors[:, :r].float()
    threshold = float(S[0]) * SINGULAR_VALUE_CUTOFF if float(S[0]) > 0 else 1e-12
    keep = S > threshold
    V = (M.T @ U) / torch.where(keep, S, torch.ones_like(S))
    V = V * keep.to(V.dtype)
    return RelexSubspace(V=V, S=S, U=U, explained=explained, eigenvalues=eigenvalues)


def relex_coefficients(deltas: torch.Tensor, subspace: RelexSubspace) -> torch.Tensor:
    """C = M V (T, r), float32: the history's coordinates in the subspace (the authors project each row)."""
    return deltas.float() @ subspace.V


def relex_linear_fit(coefficients: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """OLS with intercept of each column of ``coefficients`` (W, r) on τ = 0 … W − 1, in float64.

    a = Σ (τ − τ̄)(c − c̄) / Σ (τ − τ̄)²,  b = c̄ − a τ̄.  Returns (slopes, intercepts), each (r,) float64.
    """
    if coefficients.dim() != 2 or coefficients.shape[0] < 2:
        raise ValueError(
            f"A linear fit needs at least 2 history steps in its window, got coefficients of shape "
            f"{tuple(coefficients.shape)}: record more steps, raise the history, or widen the window."
        )
    W = coefficients.shape[0]
    tau = torch.arange(W, dtype=torch.float64)
    centred = tau - tau.mean()
    c = coefficients.double()
    slopes = (centred[:, None] * (c - c.mean(0))).sum(0) / (centred**2).sum()
    intercepts = c.mean(0) - slopes * tau.mean()
    return slopes, intercepts


def relex_fit_r2(coefficients: torch.Tensor, slopes: torch.Tensor, intercepts: torch.Tensor) -> torch.Tensor:
    """R² = 1 − SS_res / SS_tot of the fit per component (r,) float64; 1.0 where SS_tot = 0 (the authors' Finding 2
    convention in scripts/plot_svd_coefficients.py)."""
    c = coefficients.double()
    tau = torch.arange(c.shape[0], dtype=torch.float64)
    residual = ((c - (slopes * tau[:, None] + intercepts)) ** 2).sum(0)
    total = ((c - c.mean(0)) ** 2).sum(0)
    return torch.where(total > 0, 1 - residual / torch.where(total > 0, total, torch.ones_like(total)), 1.0)


def history_spacing(history_steps: Sequence[int]) -> int:
    """The common gap h between consecutive history steps (1 for a single step). τ counts positions in the history,
    so the history must be uniformly spaced (the authors' trajectories hold every step)."""
    steps = [int(s) for s in history_steps]
    if not steps:
        raise ValueError("The history holds no step.")
    gaps = {b - a for a, b in itertools.pairwise(steps)}
    if any(gap <= 0 for gap in gaps):
        raise ValueError(f"History steps must be strictly increasing, got {steps}.")
    if len(gaps) > 1:
        raise ValueError(
            f"History steps are not uniformly spaced (gaps {sorted(gaps)}): RELEX's fit axis counts positions in the "
            "history, so every gap must be equal. Record with one interval, or cut the history where it changes."
        )
    return gaps.pop() if gaps else 1


def fit_axis_step(target_step: int, step_scaling: float) -> int:
    """The fit-axis step of a target label: round(s*·scaling), Python's rounding as in the authors' ``_eff``."""
    if not step_scaling > 0:
        raise ValueError(f"step_scaling must be > 0, got {step_scaling!r} (1.0 unless labels and steps differ).")
    return round(target_step * step_scaling)


def extrapolation_position(
    target_step: int, history_steps: Sequence[int], window: int, step_scaling: float = 1.0
) -> float:
    """τ* = (W − 1) + (round(s*·scaling) − s_T) / h: the target's position on the axis of the window's fit."""
    W = effective_window(window, len(history_steps))
    spacing = history_spacing(history_steps)
    return (W - 1) + (fit_axis_step(target_step, step_scaling) - int(history_steps[-1])) / spacing


def effective_window(window: int, T: int) -> int:
    """W: the last ``window`` history rows (all T for −1), capped at T."""
    if window == -1:
        return T
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ValueError(f"window must be -1 (the whole history) or an integer >= 2, got {window!r}.")
    return min(window, T)


def relex_extrapolate(
    deltas: torch.Tensor,
    history_steps: Sequence[int],
    target_steps: Sequence[int],
    rank: int = 1,
    window: int = -1,
    step_scaling: float = 1.0,
) -> tuple[dict[int, torch.Tensor], dict]:
    """RELEX proper: the predicted flat deltas Δ̂(s*) (d,) float32 at each target label, and the tensor's report
    (explained share, singular values, R² of the fit per component). ``deltas`` (T, d) are the history rows."""
    subspace, C = _subspace_and_coefficients(deltas, history_steps, rank)
    W = effective_window(window, C.shape[0])
    fitted = C[-W:]
    slopes, intercepts = relex_linear_fit(fitted)
    predictions = {}
    for step in target_steps:
        tau = extrapolation_position(step, history_steps, window, step_scaling)
        predictions[step] = subspace.V @ (slopes * tau + intercepts).float()
    return predictions, _report(subspace, relex_fit_r2(fitted, slopes, intercepts))


def relex_fit_reconstruct(
    deltas: torch.Tensor, history_steps: Sequence[int], target_steps: Sequence[int], rank: int = 1
) -> tuple[dict[int, torch.Tensor], dict]:
    """The oracle-subspace check: fit on the whole history, predict at history steps (τ = their positions)."""
    subspace, C = _subspace_and_coefficients(deltas, history_steps, rank)
    slopes, intercepts = relex_linear_fit(C)
    position = {int(s): k for k, s in enumerate(history_steps)}
    predictions = {}
    for step in target_steps:
        if step not in position:
            raise ValueError(f"fit_reconstruct predicts at history steps only; {step} is not one of {list(position)}.")
        predictions[step] = subspace.V @ (slopes * position[step] + intercepts).float()
    return predictions, _report(subspace, relex_fit_r2(C, slopes, intercepts))


def relex_reconstruct(
    deltas: torch.Tensor,
    history_steps: Sequence[int],
    targets: dict[int, torch.Tensor | None],
    rank: int = 1,
) -> tuple[dict[int, torch.Tensor], dict]:
    """Finding 1: the rank-r projection V Vᵀ Δ(s) of observed deltas, no fit. ``targets`` maps a step to its flat
    delta; a history step may map to None (its coefficients are U·S, as the authors take them)."""
    subspace = relex_subspace(deltas, rank)
    position = {int(s): k for k, s in enumerate(history_steps)}
    predictions = {}
    for step, delta in targets.items():
        if step in position:
            c = subspace.U[position[step]] * subspace.S
        elif delta is None:
            raise ValueError(f"reconstruct needs the recorded delta of step {step}, which is not in the history.")
        else:
            c = delta.float().reshape(-1) @ subspace.V
        predictions[step] = subspace.V @ c
    return predictions, _report(subspace, None)


def _subspace_and_coefficients(deltas, history_steps, rank):
    if len(history_steps) != deltas.shape[0]:
        raise ValueError(f"{deltas.shape[0]} delta rows for {len(history_steps)} history steps.")
    subspace = relex_subspace(deltas, rank)
    return subspace, relex_coefficients(deltas, subspace)


def _report(subspace: RelexSubspace, r2: torch.Tensor | None) -> dict:
    return {
        "explained_variance": subspace.explained,
        "singular_values": subspace.S.tolist(),
        "r2": None if r2 is None else r2.tolist(),
    }


def summarize_reports(reports: Sequence[dict]) -> dict[str, float]:
    """The ``relex/`` summary over tensors: explained share (mean, median, min, max, share of tensors at ≥ 0.90,
    0.95, 0.99, the authors' variance report) and the first component's R² (mean, median) when there was a fit."""
    if not reports:
        raise ValueError("No tensor was fitted.")
    explained = torch.tensor([r["explained_variance"] for r in reports], dtype=torch.float64)
    summary = {
        "relex/tensors": float(len(reports)),
        "relex/explained_mean": float(explained.mean()),
        "relex/explained_median": float(explained.quantile(0.5)),
        "relex/explained_min": float(explained.min()),
        "relex/explained_max": float(explained.max()),
    }
    for level in (0.9, 0.95, 0.99):
        summary[f"relex/frac_explained_ge_{level}"] = float((explained >= level).double().mean())
    if all(r["r2"] is not None for r in reports):
        r2 = torch.tensor([r["r2"][0] for r in reports], dtype=torch.float64)
        summary["relex/r2_mean"] = float(r2.mean())
        summary["relex/r2_median"] = float(r2.quantile(0.5))
    return summary
