"""Singular subspaces of one weight matrix, in float64 for a float64 weight, else in float32 (pure tensor functions).

Two kinds of subspace are needed by the LoRA initialisers (https://huggingface.co/papers/2606.31813): the *principal*
one (top-r singular triplets; RLPO, PiSSA) and the *minor* one (bottom-r; RLMO, MiLoRA). Every method's default solver
is ``"full"``: the thin SVD of the whole weight, ``torch.linalg.svd(W.float(), full_matrices=False)``, exactly the
decomposition of the authors' code (Richard-ZZZ/geometry-preserving-orthonormal-init-rlvr@949965f,
``scripts/prepare_init_adapters.py``, ``select_svd_components``; PEFT's ``pissa_init``). Two faster options exist:

* ``"randomized"`` (principal): randomized subspace iteration, because power iterations amplify the top of the
  spectrum: after q iterations with oversampling p the error of direction j decays like (σ_{r+p+1} / σ_j)^(2q+1)
  (Halko, Martinsson & Tropp 2011, https://arxiv.org/abs/0909.4061, §4.5 and §10). On pretrained weights, whose
  spectra decay slowly around σ_r, that bound is weak: it lands away from the exact subspace (see
  ``top_singular_triplets``).
* ``"gram"`` (minor): the eigendecomposition of the smaller Gram matrix in **float64** (randomized methods converge to
  the top and cannot find the bottom). Squaring W squares its condition number, which float64 absorbs: its
  eigenvectors are accurate to about ε₆₄·σ₁² / (σ_j² − σ_{j+1}²), below the ε₃₂·σ₁ / (σ_j − σ_{j+1}) of the
  authors' float32 SVD of W itself at the bottom of a spectrum (measured in ``bench/lora_init.py``). More accurate,
  but not the authors' result: the two differ by the float32 SVD's error.

Every function takes ``weight`` as (d_out, d_in) and returns ``(U, S, Vh)`` with ``U`` (d_out, r), ``S`` (r,) in
decreasing order and ``Vh`` (r, d_in), on the weight's device, so ``W ≈ U diag(S) Vh`` restricted to the chosen
subspace. The working dtype (``working_dtype``) is float64 for a float64 weight and float32 for every other dtype:
float16 and bfloat16 weights are upcast (no half-precision SVD exists, pytorch#98308, and their rounding would swamp
the decomposition anyway); the results come back in the working dtype and the caller casts them to the adapter's. Randomness comes from an explicit ``torch.Generator`` on the CPU, so a seed gives the same result on
every rank and every device, and the global RNG (which drives generation sampling) is never consumed.
"""

import math

import torch


SVD_SOLVERS = ("full", "randomized", "gram")


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a weight of ``dtype`` is decomposed in: float64 stays float64, everything else uses float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _as_working_matrix(weight: torch.Tensor) -> torch.Tensor:
    if weight.dim() != 2:
        raise ValueError(f"Expected a 2-D weight matrix (d_out, d_in), got shape {tuple(weight.shape)}.")
    # No bf16/fp16 SVD exists on CPU or CUDA (pytorch#98308): those are decomposed in float32. A float64 weight is
    # decomposed in float64, so that its factors are as exact as the model that holds them.
    return weight.detach().to(working_dtype(weight.dtype))


def _check_rank(weight: torch.Tensor, r: int) -> None:
    if not 1 <= r <= min(weight.shape):
        raise ValueError(
            f"rank r={r} is not possible for a {weight.shape[0]}x{weight.shape[1]} weight: it must be between 1 and "
            f"min(d_out, d_in) = {min(weight.shape)}."
        )


def full_svd(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD in the working dtype (``torch.linalg.svd(full_matrices=False)``: the authors' RLPO/RLMO/MiLoRA and
    PEFT's ``pissa``, which decompose ``W.float()``; a float64 weight stays float64)."""
    return torch.linalg.svd(_as_working_matrix(weight), full_matrices=False)


def top_singular_triplets(
    weight: torch.Tensor,
    r: int,
    solver: str = "full",
    oversampling: int = 32,
    niter: int = 12,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The r largest singular triplets of ``weight``.

    ``solver="full"`` (default) takes them from a full thin SVD: the authors' decomposition. ``solver="randomized"``
    runs randomized subspace iteration (Halko et al. 2011, Alg. 4.4 + 5.1): a Gaussian sketch of ``r + oversampling``
    columns, ``niter`` power iterations re-orthonormalised by QR after every multiplication (stable in float32), then
    the exact SVD of the small projected matrix (Rayleigh-Ritz). With the defaults (p = 32, q = 12), measured on
    4096x4096 and 4096x11008 matrices with power-law spectra σ_i ∝ i^(-a) and r = 16, the largest principal angle to
    the exact top-r subspace is about 1e-5 for a = 1/2 and 1e-3 for a = 1/4, at about 3 % of the cost of a full SVD
    (see ``bench/lora_init.py``). Pretrained weights are flatter around σ_r: on SmolLM2-135M's weights (r = 16) it
    lands up to 0.36 away (sine of the largest principal angle to a float64 SVD; median 0.12 on the ``up_proj``
    weights; a float32 full SVD: at most 4e-4; ``bench/lora_init.py --model smollm2-135m-instruct``), while on layer
    15's weights the energy it captures is within 1.2e-4 of the exact subspace's (bench/RESULTS.md). When
    ``r + oversampling`` reaches min(d_out, d_in) the sketch would span everything, so the full SVD is used instead.
    """
    w = _as_working_matrix(weight)
    _check_rank(w, r)
    if solver == "full":
        U, S, Vh = full_svd(w)
        return U[:, :r], S[:r], Vh[:r]
    if solver != "randomized":
        raise ValueError(f"solver={solver!r} cannot find a principal subspace. Use 'full' or 'randomized'.")
    if oversampling < 0 or niter < 0:
        raise ValueError(f"oversampling and niter must be >= 0, got oversampling={oversampling}, niter={niter}.")
    k = r + oversampling
    if k >= min(w.shape):
        U, S, Vh = full_svd(w)
        return U[:, :r], S[:r], Vh[:r]
    # The sketch is drawn on the CPU from the explicit generator, then moved: identical on every rank and device.
    omega = torch.randn(w.shape[1], k, generator=generator, dtype=w.dtype).to(w.device)
    q = torch.linalg.qr(w @ omega).Q  # (d_out, k): basis of the sampled range
    for _ in range(niter):
        q = torch.linalg.qr(w.T @ q).Q  # (d_in, k)
        q = torch.linalg.qr(w @ q).Q  # (d_out, k)
    u_small, S, Vh = torch.linalg.svd(q.T @ w, full_matrices=False)  # (k, d_in) projected matrix
    return (q @ u_small[:, :r]), S[:r], Vh[:r]


def smallest_eigenpairs(
    gram: torch.Tensor,
    r: int,
    block: int = 32,
    generator: torch.Generator | None = None,
    min_size: int = 1024,
    tol: float = 1e-14,
    max_iter: int = 200,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The r smallest eigenpairs (ascending) of a symmetric PSD float64 matrix, to working precision.

    A full ``eigh`` computes all n eigenvectors (~9n³ flops, most of the cost). Instead: all eigenvalues with
    ``eigvalsh`` (tridiagonalisation only, ~4/3·n³), then shifted block inverse iteration on r + ``block`` vectors
    with (G − μI)⁻¹ (one Cholesky factorisation), μ just below λ₁. The error of the wanted subspace shrinks by
    ρ = (λ_r − μ)/(λ_{r+block+1} − μ) per iteration, known from the eigenvalues, so the iteration count is chosen to
    reach ``tol``; a Rayleigh-Ritz step on the block gives the eigenpairs. Falls back to ``eigh`` (same result, all
    vectors) for n < ``min_size``, when the block covers a quarter of the spectrum, when ρ is too close to 1 (no gap
    beyond the block), or if the shifted factorisation fails.
    """
    n = gram.shape[0]
    k = min(r + block, n)
    if n < min_size or 4 * k > n:
        evals, evecs = torch.linalg.eigh(gram)
        return evals[:r], evecs[:, :r]
    evals = torch.linalg.eigvalsh(gram)
    spread = float(evals[k] - evals[0])
    mu = float(evals[0]) - 1e-2 * spread  # below λ₁: G − μI is positive definite
    rho = float(evals[r - 1] - mu) / float(evals[k] - mu) if spread > 0 else 1.0
    chol, info = torch.linalg.cholesky_ex(gram - mu * torch.eye(n, dtype=gram.dtype, device=gram.device))
    if rho > 0.9 or int(info) != 0:
        evals, evecs = torch.linalg.eigh(gram)
        return evals[:r], evecs[:, :r]
    iterations = min(max_iter, math.ceil(math.log(tol) / math.log(rho)) + 2)
    # An explicit inverse turns each step into one GEMM (3x faster than two triangular solves on CPU); its error is
    # mostly along the dominant (wanted) directions of the inverse, which inverse iteration tolerates.
    inverse = torch.cholesky_inverse(chol)
    start = torch.randn(n, k, generator=generator, dtype=torch.float64).to(gram.device)
    q = torch.linalg.qr(start).Q
    for _ in range(iterations):
        q = torch.linalg.qr(inverse @ q).Q
    theta, y = torch.linalg.eigh(q.T @ gram @ q)  # Rayleigh-Ritz on the converged block, ascending
    return theta[:r], q @ y[:, :r]


def bottom_singular_triplets(
    weight: torch.Tensor, r: int, solver: str = "full", generator: torch.Generator | None = None, **gram_options
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The r smallest singular triplets of the thin SVD of ``weight`` (among its min(d_out, d_in) triplets).

    ``solver="full"`` (default): the last r triplets of a full SVD in the working dtype, the authors' decomposition.
    ``solver="gram"``: the smallest eigenpairs, in float64, of the smaller Gram matrix (WᵀW when d_in ≤ d_out, else
    WWᵀ; see ``smallest_eigenpairs``); the other side's vectors are W·v/σ (resp. Wᵀ·u/σ), computed in float64 too.
    Both are exact methods; ``gram`` is faster on CPU and, at the bottom of the spectrum, more accurate than a float32
    SVD, so it differs from the authors' factors by that SVD's error (see the module docstring). Returned in
    decreasing order of singular value, like the thin SVD's last r entries.
    """
    w = _as_working_matrix(weight)
    _check_rank(w, r)
    if solver == "full":
        U, S, Vh = full_svd(w)
        return U[:, -r:], S[-r:], Vh[-r:]
    if solver != "gram":
        raise ValueError(
            f"solver={solver!r} cannot find a minor subspace (randomized methods only find the top of the spectrum). "
            "Use 'full' or 'gram'."
        )
    w64 = w.to(torch.float64)
    tall = w.shape[1] <= w.shape[0]  # d_in is the small side: the right singular vectors are eigenvectors of WᵀW
    gram = w64.T @ w64 if tall else w64 @ w64.T
    evals, evecs = smallest_eigenpairs(gram, r, generator=generator, **gram_options)  # ascending
    evals, evecs = evals.flip(0), evecs.flip(1)  # decreasing, like the thin SVD's tail
    S = evals.clamp_min(0).sqrt()
    # W·v = σ·u: divide by σ, guarded so that an exactly singular direction gives a zero vector, not NaN.
    safe = torch.where(S > 0, S, torch.ones_like(S))
    if tall:
        V = evecs
        U = (w64 @ V) / safe
    else:
        U = evecs
        V = (w64.T @ U) / safe
        # v_j = Wᵀu_j/σ_j is orthonormal up to rounding amplified by σ₁/σ_j; restore it exactly (sign-preserving QR).
        q, rr = torch.linalg.qr(V)
        signs = torch.sign(torch.diagonal(rr))
        V = q * torch.where(signs == 0, torch.ones_like(signs), signs)
    return U.to(w.dtype), S.to(w.dtype), V.T.to(w.dtype).contiguous()


def principal_angle_error(basis: torch.Tensor, reference: torch.Tensor) -> float:
    """sin of the largest principal angle between the row spaces of ``basis`` and ``reference`` (both (r, d)).

    0 when the subspaces coincide, 1 when some direction of one is orthogonal to the other. Computed in float64 as
    ‖(I − P_ref) Q‖₂ with Q an orthonormal basis of ``basis``'s rows, which, unlike √(1 − cos²), stays accurate for
    small angles.
    """
    q = torch.linalg.qr(basis.detach().to(torch.float64).T).Q
    p = torch.linalg.qr(reference.detach().to(torch.float64).T).Q
    residual = q - p @ (p.T @ q)
    return float(torch.linalg.matrix_norm(residual, ord=2))
