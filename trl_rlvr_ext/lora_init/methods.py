"""The four initialisers as pure functions of one weight matrix (https://huggingface.co/papers/2606.31813).

For a frozen weight W (d_out × d_in) with thin SVD W = U diag(S) Vᴴ, LoRA computes W' = W + γ·B·A with γ = α/r
(α/√r with rsLoRA), A of shape (r, d_in) and B of shape (d_out, r):

* RLPO: A₀ = Vᴴ[:r] (orthonormal rows, no singular-value scaling), B₀ = 0, base untouched.
* RLMO: A₀ = Vᴴ[-r:] (bottom-r right singular vectors), B₀ = 0, base untouched.
* PiSSA (https://huggingface.co/papers/2404.02948): A₀ = diag(√(S_r/γ))·Vᴴ[:r], B₀ = U[:, :r]·diag(√(S_r/γ)),
  base W − γ·B₀A₀ (so γ·B₀A₀ is exactly the top-r part of W and the output is unchanged).
* MiLoRA (https://huggingface.co/papers/2406.09044): the same with the bottom-r triplets.

Each function returns factors in the decomposition's working dtype (float64 for a float64 weight, float32 otherwise;
see ``decomposition.working_dtype``); the layer code casts them to the adapter dtype and computes the residual base
weight from the *cast* factors, so that residual + γ·B₀A₀ reproduces W as closely as the dtypes allow.
"""

from dataclasses import dataclass

import torch

from .decomposition import bottom_singular_triplets, top_singular_triplets
from .options import METHODS


@dataclass
class LoraFactors:
    lora_A: torch.Tensor  # (r, d_in), in the working dtype (float64 for a float64 weight, else float32)
    lora_B: torch.Tensor  # (d_out, r), same dtype
    rewrites_base: bool  # True: the base weight must become W − γ·B₀A₀


def _triplets(weight, r, subspace, solver, oversampling, niter, generator):
    if subspace == "principal":
        return top_singular_triplets(weight, r, solver, oversampling, niter, generator)
    return bottom_singular_triplets(weight, r, solver, generator=generator)


def orthonormal_factors(
    weight: torch.Tensor,
    r: int,
    subspace: str,
    solver: str,
    oversampling: int = 32,
    niter: int = 12,
    generator: torch.Generator | None = None,
) -> LoraFactors:
    """RLPO (``subspace="principal"``) / RLMO (``"minor"``): A₀ = r right singular vectors, B₀ = 0."""
    _, _, Vh = _triplets(weight, r, subspace, solver, oversampling, niter, generator)
    return LoraFactors(Vh.contiguous(), Vh.new_zeros(weight.shape[0], r), rewrites_base=False)


def residual_factors(
    weight: torch.Tensor,
    r: int,
    scaling: float,
    subspace: str,
    solver: str,
    oversampling: int = 32,
    niter: int = 12,
    generator: torch.Generator | None = None,
) -> LoraFactors:
    """PiSSA (``subspace="principal"``) / MiLoRA (``"minor"``): √(S/γ)-scaled singular vectors; base gets rewritten.

    Dividing S by γ before the square root (as PEFT's ``pissa_init`` does) makes γ·B₀A₀ = U_r diag(S_r) Vᴴ_r.
    """
    U, S, Vh = _triplets(weight, r, subspace, solver, oversampling, niter, generator)
    root = torch.sqrt(S / scaling)
    return LoraFactors((root[:, None] * Vh).contiguous(), (U * root[None, :]).contiguous(), rewrites_base=True)


def lora_factors(
    method: str,
    weight: torch.Tensor,
    r: int,
    scaling: float,
    solver: str | None = None,
    oversampling: int = 32,
    niter: int = 12,
    generator: torch.Generator | None = None,
) -> LoraFactors:
    """Initial (A₀, B₀) of ``method`` (rlpo, rlmo, pissa, milora) for one weight (d_out, d_in), in its working dtype."""
    if method not in METHODS:
        raise ValueError(f"Unknown method {method!r}. Use one of {list(METHODS)}.")
    spec = METHODS[method]
    solver = solver or spec.default_solver
    if spec.rewrites_base:
        return residual_factors(weight, r, scaling, spec.subspace, solver, oversampling, niter, generator)
    return orthonormal_factors(weight, r, spec.subspace, solver, oversampling, niter, generator)
