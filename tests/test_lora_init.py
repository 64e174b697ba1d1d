"""LoRA initialisers (RLPO, RLMO, PiSSA, MiLoRA): numerics, per-layer properties, PEFT parity, errors, saving."""

import copy
import math
from contextlib import contextmanager

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn

from trl_rlvr_ext.lora_init import api as lora_api
from trl_rlvr_ext.lora_init import (
    check_lora_init_args,
    get_lora_init_info,
    get_peft_model_with_init,
    init_lora,
    lora_factors,
    principal_angle_error,
    save_converted_adapter,
    save_initial_adapter,
)
from trl_rlvr_ext.lora_init.decomposition import bottom_singular_triplets, smallest_eigenpairs, top_singular_triplets
from trl_rlvr_ext.toy import make_model, make_tokenizer


OURS = ["rlpo", "rlmo", "pissa", "milora"]
PRINCIPAL = {"rlpo": True, "pissa": True, "rlmo": False, "milora": False}
RESIDUAL = {"rlpo": False, "rlmo": False, "pissa": True, "milora": True}


# ---------------------------------------------------------------------------------------------------- helpers
def spectrum_matrix(d_out, d_in, singular_values, seed=0):
    """float32 W = U diag(s) Vᵀ with random orthonormal U, V (built in float64)."""
    g = torch.Generator().manual_seed(seed)
    k = min(d_out, d_in)
    U = torch.linalg.qr(torch.randn(d_out, k, generator=g, dtype=torch.float64)).Q
    V = torch.linalg.qr(torch.randn(d_in, k, generator=g, dtype=torch.float64)).Q
    return ((U * singular_values) @ V.T).float()


def exact_svd(weight):
    return torch.linalg.svd(weight.double(), full_matrices=False)


class TwoLinear(nn.Module):
    """Two linear layers with given weights (so that spectra, hence subspaces, are well defined)."""

    def __init__(self, w1, w2):
        super().__init__()
        self.up = nn.Linear(w1.shape[1], w1.shape[0], bias=False)
        self.down = nn.Linear(w2.shape[1], w2.shape[0], bias=True)
        with torch.no_grad():
            self.up.weight.copy_(w1)
            self.down.weight.copy_(w2)
            self.down.bias.normal_()

    def forward(self, x):
        return self.down(torch.tanh(self.up(x)))


def two_linear(seed=0):
    # geometric spectra (ratio 0.93): clear gaps everywhere, condition number ~1e3-1e4
    w1 = spectrum_matrix(96, 64, 0.93 ** torch.arange(64, dtype=torch.float64), seed)
    w2 = spectrum_matrix(48, 96, 2 * 0.9 ** torch.arange(48, dtype=torch.float64), seed + 1)
    return TwoLinear(w1, w2)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = make_tokenizer()
    return make_model(tokenizer, hidden_size=32, intermediate_size=64, seed=0)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(3, 250, (2, 9), generator=torch.Generator().manual_seed(0))


def lora_config(**kwargs):
    kwargs.setdefault("r", 4)
    kwargs.setdefault("lora_alpha", 8)
    kwargs.setdefault("target_modules", "all-linear")
    return LoraConfig(**kwargs)


def lora_layers(peft_model, adapter="default"):
    from peft.tuners.lora import LoraLayer

    return {n: m for n, m in peft_model.named_modules() if isinstance(m, LoraLayer) and adapter in m.lora_A}


def original_weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def base_weight_of(original, layer_name):
    # "base_model.model.model.layers.0.self_attn.q_proj" -> "model.layers.0.self_attn.q_proj.weight"
    return original[layer_name.removeprefix("base_model.model.") + ".weight"]


# ---------------------------------------------------------------------------------------------------- numerics
def test_principal_angle_error_hand_values():
    t = 0.3
    line = torch.tensor([[math.cos(t), math.sin(t)]], dtype=torch.float64)
    assert principal_angle_error(torch.tensor([[1.0, 0.0]], dtype=torch.float64), line) == pytest.approx(
        math.sin(t), rel=1e-12
    )
    assert principal_angle_error(torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([[-1.0, 0.0, 0.0]])) < 1e-15
    assert principal_angle_error(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])) == pytest.approx(1.0)
    # same 2-D subspace, different bases
    a = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    b = torch.tensor([[1.0, 1.0, 0.0], [1.0, -1.0, 0.0]])
    assert principal_angle_error(a, b) < 1e-15


def test_randomized_top_triplets_match_exact_svd():
    W = spectrum_matrix(200, 120, 0.9 ** torch.arange(120, dtype=torch.float64))
    U_ref, S_ref, Vh_ref = exact_svd(W)
    U, S, Vh = top_singular_triplets(W, 8, "randomized", generator=torch.Generator().manual_seed(0))
    assert (U.shape, S.shape, Vh.shape) == ((200, 8), (8,), (8, 120))
    assert principal_angle_error(Vh, Vh_ref[:8]) < 1e-5
    assert principal_angle_error(U.T, U_ref[:, :8].T) < 1e-5
    torch.testing.assert_close(S.double(), S_ref[:8], rtol=1e-5, atol=0)
    torch.testing.assert_close(W @ Vh.T, U * S, atol=1e-5, rtol=0)
    # the knobs matter: no oversampling and no power iteration is far off on the same matrix
    _, _, Vh_crude = top_singular_triplets(W, 8, "randomized", 0, 0, torch.Generator().manual_seed(0))
    assert principal_angle_error(Vh_crude, Vh_ref[:8]) > 1e-2


@pytest.mark.parametrize("shape", [(150, 60), (60, 150)])
def test_gram_bottom_triplets_exact(shape):
    k = min(shape)
    W = spectrum_matrix(*shape, torch.logspace(0, -3, k, dtype=torch.float64))
    _, S_ref, Vh_ref = exact_svd(W)
    U, S, Vh = bottom_singular_triplets(W, 6, "gram")
    assert (U.shape, S.shape, Vh.shape) == ((shape[0], 6), (6,), (6, shape[1]))
    assert principal_angle_error(Vh, Vh_ref[-6:]) < 1e-6
    torch.testing.assert_close(S.double(), S_ref[-6:], rtol=1e-6, atol=0)  # decreasing, like the thin SVD's tail
    torch.testing.assert_close(Vh @ Vh.T, torch.eye(6), atol=1e-6, rtol=0)
    torch.testing.assert_close(W @ Vh.T, U * S, atol=1e-6, rtol=0)


@pytest.mark.parametrize("spectrum", ["power", "flat_bottom"])
def test_smallest_eigenpairs_subset_iteration_matches_eigh(spectrum):
    n = 300
    g = torch.Generator().manual_seed(0)
    Q = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64)).Q
    lam = torch.arange(1, n + 1, dtype=torch.float64) ** -1.0
    if spectrum == "flat_bottom":  # no gap beyond the block: the inverse iteration would crawl, eigh is used
        lam[-60:] = lam[-60]
    G = (Q * lam) @ Q.T
    G = (G + G.T) / 2
    ref_vals, ref_vecs = torch.linalg.eigh(G)
    vals, vecs = smallest_eigenpairs(G, 6, block=8, generator=g, min_size=0)
    torch.testing.assert_close(vals, ref_vals[:6], rtol=1e-10, atol=1e-14)
    if spectrum == "power":
        assert principal_angle_error(vecs.T, ref_vecs[:, :6].T) < 1e-10
    else:  # a degenerate bottom eigenspace: any basis of it is right
        assert principal_angle_error(vecs.T, ref_vecs[:, :60].T) < 1e-10
    torch.testing.assert_close(vecs.T @ vecs, torch.eye(6, dtype=torch.float64), atol=1e-12, rtol=0)


def test_gram_is_more_accurate_than_float32_svd_at_the_bottom():
    # Documented claim: float64 Gram eigenvectors beat a float32 SVD on the minor subspace.
    W = spectrum_matrix(128, 256, torch.logspace(0, -3, 128, dtype=torch.float64))
    _, _, Vh_ref = exact_svd(W)
    err_gram = principal_angle_error(bottom_singular_triplets(W, 8, "gram")[2], Vh_ref[-8:])
    err_full = principal_angle_error(bottom_singular_triplets(W, 8, "full")[2], Vh_ref[-8:])
    assert err_gram < 1e-6
    assert err_gram < err_full


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_decomposition_working_dtype(dtype):
    """float64 in, float64 out (and float64-accurate); every other dtype is decomposed in float32."""
    W = spectrum_matrix(80, 50, 0.9 ** torch.arange(50, dtype=torch.float64)).double().to(dtype)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    _, S_ref, Vh_ref = exact_svd(W.double())
    g = torch.Generator().manual_seed(0)
    for solver in ["randomized", "full"]:
        U, S, Vh = top_singular_triplets(W, 4, solver=solver, oversampling=8, generator=g)
        assert U.dtype == S.dtype == Vh.dtype == work
        if dtype == torch.float64:
            assert principal_angle_error(Vh, Vh_ref[:4]) < 1e-10
            torch.testing.assert_close(S, S_ref[:4], atol=1e-12, rtol=0)
    for solver in ["gram", "full"]:
        U, S, Vh = bottom_singular_triplets(W, 4, solver=solver)
        assert U.dtype == S.dtype == Vh.dtype == work
        if dtype == torch.float64:
            assert principal_angle_error(Vh, Vh_ref[-4:]) < 1e-10
            torch.testing.assert_close(S, S_ref[-4:], atol=1e-12, rtol=0)


def test_randomized_is_seeded_and_leaves_global_rng_alone():
    W = spectrum_matrix(200, 120, 0.97 ** torch.arange(120, dtype=torch.float64))
    state = torch.get_rng_state()
    a = top_singular_triplets(W, 8, "randomized", 4, 1, torch.Generator().manual_seed(5))
    b = top_singular_triplets(W, 8, "randomized", 4, 1, torch.Generator().manual_seed(5))
    c = top_singular_triplets(W, 8, "randomized", 4, 1, torch.Generator().manual_seed(6))
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[2], c[2])


def test_decomposition_input_errors():
    W = torch.randn(10, 6)
    with pytest.raises(ValueError, match="between 1 and min"):
        top_singular_triplets(W, 7)
    with pytest.raises(ValueError, match="between 1 and min"):
        bottom_singular_triplets(W, 0)
    with pytest.raises(ValueError, match="randomized methods only find the top"):
        bottom_singular_triplets(W, 2, "randomized")
    with pytest.raises(ValueError, match="cannot find a principal subspace"):
        top_singular_triplets(W, 2, "gram")
    with pytest.raises(ValueError, match="2-D"):
        top_singular_triplets(torch.randn(2, 3, 4), 1)


# ---------------------------------------------------------------------------------------------------- pure factors
# W (4x5) = diag(5, 4, 3, 2) padded: right singular vectors e1..e4, left e1..e4. r = 2, γ = 2.
DIAG = torch.cat([torch.diag(torch.tensor([5.0, 4.0, 3.0, 2.0])), torch.zeros(4, 1)], dim=1)


@pytest.mark.parametrize("solver", [None, "full"])
def test_factors_hand_computed(solver):
    e = torch.eye(5)
    rlpo = lora_factors("rlpo", DIAG, 2, 2.0, solver=solver)
    torch.testing.assert_close(rlpo.lora_A.abs(), e[:2], atol=1e-6, rtol=0)
    assert torch.equal(rlpo.lora_B, torch.zeros(4, 2)) and not rlpo.rewrites_base
    rlmo = lora_factors("rlmo", DIAG, 2, 2.0, solver=solver)
    torch.testing.assert_close(rlmo.lora_A.abs(), e[2:4], atol=1e-6, rtol=0)  # σ = 3 then 2
    assert torch.equal(rlmo.lora_B, torch.zeros(4, 2)) and not rlmo.rewrites_base

    pissa = lora_factors("pissa", DIAG, 2, 2.0, solver=solver)
    assert pissa.rewrites_base
    # A₀ = √(S/γ)·Vᴴ: row norms √(5/2), √(4/2); γ·B₀A₀ = the top-2 part of W
    torch.testing.assert_close(pissa.lora_A.norm(dim=1), torch.tensor([2.5, 2.0]).sqrt(), atol=1e-6, rtol=0)
    top = torch.zeros(4, 5)
    top[0, 0], top[1, 1] = 5.0, 4.0
    torch.testing.assert_close(2.0 * pissa.lora_B @ pissa.lora_A, top, atol=1e-5, rtol=0)
    milora = lora_factors("milora", DIAG, 2, 2.0, solver=solver)
    bottom = torch.zeros(4, 5)
    bottom[2, 2], bottom[3, 3] = 3.0, 2.0
    torch.testing.assert_close(2.0 * milora.lora_B @ milora.lora_A, bottom, atol=1e-5, rtol=0)
    torch.testing.assert_close(milora.lora_A.norm(dim=1), torch.tensor([1.5, 1.0]).sqrt(), atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------- authors' code
# Re-typed from Richard-ZZZ/geometry-preserving-orthonormal-init-rlvr@949965f, scripts/prepare_init_adapters.py:
# `select_svd_components` (mode "max" for RLPO, "min" for RLMO/MiLoRA), `initialize_orthogonal_zero_b_layer`,
# `initialize_milora_layer` and the base update of `apply_milora_init`; they pass `base_weight.float()`.
def authors_svd_components(weights, rank, mode):
    u, s, vh = torch.linalg.svd(weights, full_matrices=False)
    n = len(s)
    idx = torch.arange(rank) if mode == "max" else torch.arange(n - rank, n)
    return u[:, idx], s[idx], vh[idx, :]


def authors_orthogonal_zero_b(weights, rank, mode):
    _, _, vh = authors_svd_components(weights, rank, mode)
    return vh.contiguous(), torch.zeros(weights.shape[0], rank, dtype=weights.dtype)


def authors_milora(weights, rank, scale, mode="min"):
    u, s, vh = authors_svd_components(weights, rank, mode)
    sqrt_s = torch.sqrt(s)  # no division by the LoRA scale (the authors run MiLoRA at r = α = 32, scale 1)
    lora_b, lora_a = u @ torch.diag(sqrt_s), torch.diag(sqrt_s) @ vh
    return lora_a, lora_b, weights - scale * (lora_b @ lora_a)


# Re-typed from PEFT 0.21.2, peft/tuners/lora/layer.py, `LoraLayer.pissa_init` (the "pissa" branch; PiSSA's authors
# initialise through PEFT). The RLPO authors' PiSSA baseline is PEFT's "pissa_niter_4" (a pass-through here).
def peft_pissa(weights, rank, scale):
    v, s, uh = torch.linalg.svd(weights, full_matrices=False)
    sr = s[:rank] / scale
    lora_a, lora_b = torch.diag(torch.sqrt(sr)) @ uh[:rank], v[:, :rank] @ torch.diag(torch.sqrt(sr))
    return lora_a, lora_b, weights - scale * lora_b @ lora_a


# 192x72, r = 16, a spectrum that decays slowly around σ_16 (σ_i = i^(-1/10), σ_17/σ_16 = 0.994), like the MLP weights
# of SmolLM2-135M. At i^(-1/2) the randomized solver's 48-column sketch already covers 2/3 of this 72-wide weight and it
# converges to float32 rounding (3e-6), so it could not be told apart; here it lands 0.07-0.1 away.
SLOW = spectrum_matrix(192, 72, torch.arange(1, 73, dtype=torch.float64) ** -0.1, seed=3)


def one_layer_init(weight, method, r, alpha, **options):
    d_out, d_in = weight.shape
    module = nn.Sequential(nn.Linear(d_in, d_out, bias=False))
    with torch.no_grad():
        module[0].weight.copy_(weight)
    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=["0"])
    layer = get_peft_model_with_init(module, cfg, method, show_progress=False, **options).base_model.model[0]
    weights = (layer.lora_A["default"].weight, layer.lora_B["default"].weight, layer.get_base_layer().weight)
    return tuple(w.detach().clone() for w in weights)


@pytest.mark.parametrize("method, mode", [("rlpo", "max"), ("rlmo", "min")])
def test_default_rlpo_rlmo_equal_authors_code(method, mode):
    A, B, base = one_layer_init(SLOW, method, 16, 32)
    ref_A, ref_B = authors_orthogonal_zero_b(SLOW.float(), 16, mode)
    assert torch.equal(A, ref_A) and torch.equal(B, ref_B)  # the same SVD call: equal to the bit, signs included
    assert torch.equal(base, SLOW)
    # the faster options are not the authors' factors on this spectrum (randomized: the top; gram: the float64 bottom)
    other = {"rlpo": "randomized", "rlmo": "gram"}[method]
    A_other = one_layer_init(SLOW, method, 16, 32, solver=other)[0]
    assert principal_angle_error(A_other, ref_A) > {"rlpo": 1e-2, "rlmo": 1e-6}[method]


@pytest.mark.parametrize(
    "method, alpha, reference, other, apart",
    [("milora", 16, authors_milora, "gram", 1e-6), ("pissa", 32, peft_pissa, "randomized", 1e-2)],
)
def test_default_milora_pissa_equal_reference_code(method, alpha, reference, other, apart):
    # MiLoRA at the authors' setting r = α (scale 1); PiSSA at the paper's r = 16, α = 32 (scale 2): A₀, B₀ and the
    # residual base as theirs, up to float32 rounding; the faster option lands measurably elsewhere
    A, B, base = one_layer_init(SLOW, method, 16, alpha)
    ref_A, ref_B, ref_base = reference(SLOW.float(), 16, alpha / 16)
    torch.testing.assert_close(A, ref_A, atol=1e-7, rtol=0)
    torch.testing.assert_close(B, ref_B, atol=1e-7, rtol=0)
    torch.testing.assert_close(base, ref_base, atol=1e-6, rtol=0)
    assert principal_angle_error(one_layer_init(SLOW, method, 16, alpha, solver=other)[0], ref_A) > apart


# Re-typed from MiLoRA's own authors, deondou/reproduce_lora@211f71c, svd_init.py: `initialize_lora_layer` (mode "min";
# it sets lora_alpha = rank inside, so its scaling is 1 and `S_select /= scaling` changes nothing) and the base update
# `base_layer.weight.data -= delta` of `svd_tailor_and_save` (their scripts set lora_alpha = svd_rank).
def milora_authors_layer(weights, rank):
    U, S, V = torch.linalg.svd(weights, full_matrices=False)
    S_sqrt = torch.sqrt(S[-rank:] / 1.0)
    B, A = U[:, -rank:] @ torch.diag(S_sqrt), torch.diag(S_sqrt) @ V[-rank:, :]
    return A, B, weights - 1.0 * B @ A


def test_default_milora_equals_the_milora_authors_code():
    A, B, base = one_layer_init(SLOW, "milora", 16, 16)
    ref_A, ref_B, ref_base = milora_authors_layer(SLOW.float(), 16)
    torch.testing.assert_close(A, ref_A, atol=1e-7, rtol=0)
    torch.testing.assert_close(B, ref_B, atol=1e-7, rtol=0)
    torch.testing.assert_close(base, ref_base, atol=1e-6, rtol=0)


def test_milora_departs_from_authors_code_at_scale_two():
    # At γ = α/r ≠ 1 (r = 16, α = 32) ours divides σ by γ (as PEFT's PiSSA), so γ·B₀A₀ is the minor part of W and the
    # base is W minus it; theirs keeps √σ, so the base is W − γ·(minor part). Same output at init.
    A, B, base = one_layer_init(SLOW, "milora", 16, 32)
    ref_A, ref_B, ref_base = authors_milora(SLOW.float(), 16, 2.0)
    torch.testing.assert_close(A * math.sqrt(2.0), ref_A, atol=1e-6, rtol=0)
    torch.testing.assert_close(B * math.sqrt(2.0), ref_B, atol=1e-6, rtol=0)
    torch.testing.assert_close(2.0 * (base - SLOW), ref_base - SLOW, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------- real layers
@pytest.mark.parametrize("method", OURS)
def test_init_on_tiny_qwen2(tiny, ids, method):
    original = original_weights(tiny)
    expected_logits = tiny(ids).logits
    peft_model = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), method, show_progress=False)

    # output unchanged at init
    torch.testing.assert_close(peft_model(ids).logits, expected_logits, atol=1e-5, rtol=1e-5)
    # never re-run by TRL's add_adapter("ref", config) or from_pretrained
    assert peft_model.peft_config["default"].init_lora_weights is True
    assert get_lora_init_info(peft_model).method == method

    layers = lora_layers(peft_model)
    assert len(layers) == 14  # 7 linear projections x 2 layers (lm_head excluded by "all-linear")
    for name, layer in layers.items():
        W = base_weight_of(original, name)
        A, B = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        gamma = layer.scaling["default"]
        assert gamma == 2.0
        _, _, Vh_ref = exact_svd(W)
        reference = Vh_ref[:4] if PRINCIPAL[method] else Vh_ref[-4:]
        # the right singular subspace (vs float64 SVD)
        assert principal_angle_error(A, reference) < 1e-3, name
        base = layer.get_base_layer().weight
        if RESIDUAL[method]:
            torch.testing.assert_close(base, W - gamma * B @ A, atol=1e-6, rtol=0)
            assert (base - W).abs().max() > 1e-3  # rewritten
            # γ·B₀A₀ is exactly the chosen rank-4 part of W
            U_ref, S_ref, _ = exact_svd(W)
            idx = slice(0, 4) if PRINCIPAL[method] else slice(-4, None)
            part = (U_ref[:, idx] * S_ref[idx]) @ Vh_ref[idx]
            torch.testing.assert_close((gamma * B @ A).double(), part, atol=1e-5, rtol=0)
        else:
            assert torch.equal(base, W)  # untouched, to the bit
            torch.testing.assert_close(A @ A.T, torch.eye(4), atol=1e-5, rtol=0)  # orthonormal rows
            assert torch.equal(B, torch.zeros_like(B))


@pytest.mark.parametrize("method", OURS)
def test_subspace_on_well_conditioned_layers(method):
    # the faster solvers exercised for real (randomized: r + oversampling < min dims), default options otherwise
    model = two_linear()
    W = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("weight")}
    x = torch.randn(5, 64)
    expected = model(x)
    cfg = LoraConfig(r=6, lora_alpha=12, target_modules=["up", "down"])
    peft_model = get_peft_model_with_init(
        model, cfg, method, show_progress=False,
        **({"solver": "randomized", "oversampling": 8} if PRINCIPAL[method] else {"solver": "gram"}),
    )  # fmt: skip
    torch.testing.assert_close(peft_model(x), expected, atol=1e-5, rtol=1e-5)
    for short in ("up", "down"):
        layer = peft_model.base_model.model.get_submodule(short)
        _, _, Vh_ref = exact_svd(W[f"{short}.weight"])
        reference = Vh_ref[:6] if PRINCIPAL[method] else Vh_ref[-6:]
        assert principal_angle_error(layer.lora_A["default"].weight, reference) < 1e-5


def test_pissa_equals_peft_pissa(tiny, ids):
    ours = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "pissa", show_progress=False)
    peft = get_peft_model(copy.deepcopy(tiny), lora_config(init_lora_weights="pissa"))
    torch.testing.assert_close(ours(ids).logits, peft(ids).logits, atol=1e-5, rtol=1e-5)
    with ours.disable_adapter(), peft.disable_adapter():  # the same residual model
        torch.testing.assert_close(ours(ids).logits, peft(ids).logits, atol=1e-5, rtol=1e-5)
    peft_layers = lora_layers(peft)
    for name, layer in lora_layers(ours).items():
        other = peft_layers[name]
        # singular vectors are defined up to sign: compare B·A products, residual weights and subspaces
        ours_ba = layer.lora_B["default"].weight @ layer.lora_A["default"].weight
        peft_ba = other.lora_B["default"].weight @ other.lora_A["default"].weight
        torch.testing.assert_close(ours_ba, peft_ba, atol=1e-5, rtol=0)
        torch.testing.assert_close(layer.get_base_layer().weight, other.get_base_layer().weight, atol=1e-5, rtol=0)
        assert principal_angle_error(layer.lora_A["default"].weight, other.lora_A["default"].weight) < 1e-4


def test_randomized_pissa_close_to_peft_full_pissa():
    ours = get_peft_model_with_init(
        two_linear(), LoraConfig(r=6, lora_alpha=12, target_modules=["up", "down"]), "pissa", solver="randomized",
        oversampling=8, show_progress=False,
    )  # fmt: skip
    peft = get_peft_model(
        two_linear(), LoraConfig(r=6, lora_alpha=12, target_modules=["up", "down"], init_lora_weights="pissa")
    )
    for short in ("up", "down"):
        a, b = ours.base_model.model.get_submodule(short), peft.base_model.model.get_submodule(short)
        torch.testing.assert_close(
            a.lora_B["default"].weight @ a.lora_A["default"].weight,
            b.lora_B["default"].weight @ b.lora_A["default"].weight,
            atol=1e-5,
            rtol=0,
        )


@pytest.mark.parametrize("method", ["rlpo", "pissa"])
def test_rslora_scaling(tiny, ids, method):
    plain = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(r=4, lora_alpha=8), method, show_progress=False)
    rs = get_peft_model_with_init(
        copy.deepcopy(tiny), lora_config(r=4, lora_alpha=8, use_rslora=True), method, show_progress=False
    )
    torch.testing.assert_close(rs(ids).logits, tiny(ids).logits, atol=1e-5, rtol=1e-5)
    plain_layers = lora_layers(plain)
    for name, layer in lora_layers(rs).items():
        assert layer.scaling["default"] == 8 / math.sqrt(4) == 4.0  # α/√r
        assert plain_layers[name].scaling["default"] == 8 / 4  # α/r
        a_rs, a_plain = layer.lora_A["default"].weight, plain_layers[name].lora_A["default"].weight
        if method == "rlpo":  # no singular-value scaling: γ does not enter A₀
            torch.testing.assert_close(a_rs.norm(dim=1), torch.ones(4), atol=1e-5, rtol=0)
        else:  # A₀ = √(S/γ)·Vᴴ: halving 1/γ (2 -> 4) divides the row norms by √2
            torch.testing.assert_close(a_rs.norm(dim=1) * math.sqrt(2), a_plain.norm(dim=1), atol=1e-5, rtol=1e-5)
            b = layer.lora_B["default"].weight
            torch.testing.assert_close(
                4.0 * b @ a_rs,
                2.0 * plain_layers[name].lora_B["default"].weight @ a_plain,
                atol=1e-5,
                rtol=0,
            )


@pytest.mark.parametrize("method", ["rlpo", "milora"])
def test_gpt2_conv1d_fan_in_fan_out(method):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=1, n_head=2)).eval()
    ids = torch.randint(0, 50, (2, 6))
    expected = model(ids).logits
    c_attn = model.transformer.h[0].attn.c_attn.weight.detach().clone()  # Conv1D: stored (d_in, d_out)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_fc"], fan_in_fan_out=True)
    peft_model = get_peft_model_with_init(model, cfg, method, show_progress=False)
    torch.testing.assert_close(peft_model(ids).logits, expected, atol=1e-5, rtol=1e-5)
    layer = peft_model.base_model.model.transformer.h[0].attn.c_attn
    _, _, Vh_ref = exact_svd(c_attn.T)  # the (d_out, d_in) matrix
    reference = Vh_ref[:4] if method == "rlpo" else Vh_ref[-4:]
    assert principal_angle_error(layer.lora_A["default"].weight, reference) < 1e-3


def test_bf16_base(tiny, ids):
    model16 = copy.deepcopy(tiny).to(torch.bfloat16)
    expected = model16(ids).logits.float()
    before = original_weights(model16)
    peft_model = get_peft_model_with_init(copy.deepcopy(model16), lora_config(), "rlpo", show_progress=False)
    for name, layer in lora_layers(peft_model).items():
        assert layer.lora_A["default"].weight.dtype == torch.float32  # PEFT's autocast_adapter_dtype
        assert torch.equal(layer.get_base_layer().weight, base_weight_of(before, name))
        A = layer.lora_A["default"].weight
        torch.testing.assert_close(A @ A.T, torch.eye(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(peft_model(ids).logits.float(), expected, atol=0, rtol=0)
    # PiSSA in bf16: decomposed in float32, residual rounded to bf16 (so equal only up to bf16 rounding)
    pissa = get_peft_model_with_init(copy.deepcopy(model16), lora_config(), "pissa", show_progress=False)
    assert all(layer.get_base_layer().weight.dtype == torch.bfloat16 for layer in lora_layers(pissa).values())
    torch.testing.assert_close(pissa(ids).logits.float(), expected, atol=2e-2, rtol=2e-2)


# dtype -> (tolerance on the logits at init, dtype the decomposition runs in, dtype PEFT gives the adapter)
DTYPE_PATHS = {
    torch.float64: (1e-10, torch.float64, torch.float64),
    torch.float32: (1e-5, torch.float32, torch.float32),
    torch.float16: (1e-2, torch.float32, torch.float32),
    torch.bfloat16: (2e-2, torch.float32, torch.float32),
}


@pytest.mark.parametrize("method", OURS)
@pytest.mark.parametrize("dtype", list(DTYPE_PATHS), ids=str)
def test_each_base_dtype_path(tiny, ids, method, dtype, monkeypatch):
    """float64 is decomposed in float64; float32, float16 and bfloat16 in float32 (half precision upcast, then cast
    back). The output is unchanged at init within the dtype's tolerance, and every written weight keeps its dtype."""
    tolerance, work_dtype, adapter_dtype = DTYPE_PATHS[dtype]
    model = copy.deepcopy(tiny).to(dtype)
    expected = model(ids).logits
    before = original_weights(model)
    seen = []
    real_lora_factors = lora_api.lora_factors
    monkeypatch.setattr(
        lora_api, "lora_factors", lambda m, w, *a, **k: seen.append(w.dtype) or real_lora_factors(m, w, *a, **k)
    )
    peft_model = get_peft_model_with_init(copy.deepcopy(model), lora_config(), method, show_progress=False)
    assert seen and set(seen) == {work_dtype}
    assert peft_model(ids).logits.dtype == dtype
    torch.testing.assert_close(peft_model(ids).logits, expected, atol=tolerance, rtol=tolerance)
    for name, layer in lora_layers(peft_model).items():
        base = layer.get_base_layer().weight
        assert base.dtype == dtype
        A, B = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        assert A.dtype == B.dtype == adapter_dtype
        if not RESIDUAL[method]:
            assert torch.equal(base, base_weight_of(before, name))
            # orthonormal rows to the working precision: 1e-12 proves the float64 path decomposed in float64
            torch.testing.assert_close(
                A @ A.T, torch.eye(4, dtype=A.dtype), atol=1e-12 if dtype == torch.float64 else 1e-5, rtol=0
            )
        elif dtype == torch.float64:
            # γ·B₀A₀ is the top-r (PiSSA) or bottom-r (MiLoRA) part of W, computed in float64
            U, S, Vh = exact_svd(base_weight_of(before, name))
            keep = slice(0, 4) if PRINCIPAL[method] else slice(-4, None)
            part = (U[:, keep] * S[keep]) @ Vh[keep]
            torch.testing.assert_close(layer.scaling["default"] * (B @ A), part, atol=1e-10, rtol=0)


@pytest.mark.parametrize("method", ["rlpo", "pissa"])
def test_dora_output_unchanged(tiny, ids, method):
    peft_model = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(use_dora=True), method, show_progress=False)
    torch.testing.assert_close(peft_model(ids).logits, tiny(ids).logits, atol=1e-5, rtol=1e-5)


def test_ref_adapter_copy_does_not_rerun_init(tiny):
    # What TRL does with a PeftModel: add_adapter("ref", default_config) then copy the weights.
    peft_model = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "pissa", show_progress=False)
    residual = {n: m.get_base_layer().weight.detach().clone() for n, m in lora_layers(peft_model).items()}
    peft_model.add_adapter("ref", peft_model.peft_config["default"])
    for name, layer in lora_layers(peft_model).items():
        assert torch.equal(layer.get_base_layer().weight, residual[name])
    # ...whereas a config still saying "pissa" rewrites the already-residual base a second time
    hazard = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "pissa", show_progress=False)
    cfg = copy.deepcopy(hazard.peft_config["default"])
    cfg.init_lora_weights = "pissa"
    hazard.add_adapter("ref", cfg)
    name = next(iter(residual))
    assert not torch.allclose(lora_layers(hazard)[name].get_base_layer().weight, residual[name])


def test_weights_are_gathered_for_zero3(tiny, monkeypatch):
    gathered = []

    @contextmanager
    def recording_ctx(params, modifier_rank=0, fwd_module=None):
        gathered.append(([id(p) for p in params], modifier_rank))
        yield

    monkeypatch.setattr(lora_api, "gather_params_ctx", recording_ctx)
    peft_model = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "milora", show_progress=False)
    layers = lora_layers(peft_model)
    assert len(gathered) == len(layers)
    for (ids_, rank), layer in zip(gathered, layers.values()):
        assert rank == 0
        expected = [layer.get_base_layer().weight, layer.lora_A["default"].weight, layer.lora_B["default"].weight]
        assert ids_ == [id(p) for p in expected]


def test_seed_reproducible_and_changes_randomized_factors():
    def factors(seed):
        peft_model = get_peft_model_with_init(
            two_linear(), LoraConfig(r=6, lora_alpha=12, target_modules=["up"]), "rlpo", solver="randomized",
            oversampling=4, niter=1, seed=seed, show_progress=False,
        )  # fmt: skip
        return peft_model.base_model.model.up.lora_A["default"].weight.detach().clone()

    assert torch.equal(factors(3), factors(3))
    assert not torch.equal(factors(3), factors(4))


# ---------------------------------------------------------------------------------------------------- PEFT's own inits
@pytest.mark.parametrize("method", [True, "gaussian", "olora", "orthogonal", "pissa_niter_4", "mica"])
def test_peft_passthrough(tiny, ids, method):
    peft_model = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), method)
    torch.testing.assert_close(peft_model(ids).logits, tiny(ids).logits, atol=1e-5, rtol=1e-5)
    expected_config = "mica" if method == "mica" else True
    assert peft_model.peft_config["default"].init_lora_weights == expected_config
    assert get_lora_init_info(peft_model).rewrites_base == (method in ("olora", "pissa_niter_4"))


# ---------------------------------------------------------------------------------------------------- bad input
def test_unknown_and_refused_methods(tiny):
    with pytest.raises(ValueError, match="Unknown LoRA init 'geo'.*rlpo, rlmo, pissa, milora"):
        get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "geo")
    for refused in (False, "eva", "corda", "loftq", "lora_ga"):
        with pytest.raises(ValueError, match="not supported here"):
            get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), refused)
    with pytest.raises(TypeError, match="must be a string"):
        get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), 3)


def test_rank_larger_than_layer(tiny):
    # k_proj / v_proj are 16 x 32 here
    with pytest.raises(ValueError, match=r"r=20 is larger than min\(d_out, d_in\) = min\(16, 32\) = 16.*k_proj"):
        get_peft_model_with_init(copy.deepcopy(tiny), lora_config(r=20), "rlpo", show_progress=False)


def test_rank_error_leaves_weights_untouched(tiny):
    peft_model = get_peft_model(copy.deepcopy(tiny), lora_config(r=20))
    before = original_weights(peft_model)
    with pytest.raises(ValueError, match="larger than min"):
        init_lora(peft_model, "pissa", show_progress=False)
    after = original_weights(peft_model)
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_non_linear_target(tiny):
    with pytest.raises(ValueError, match="needs linear target modules, but 'base_model.model.model.embed_tokens'"):
        get_peft_model_with_init(
            copy.deepcopy(tiny), lora_config(target_modules=["embed_tokens", "q_proj"]), "rlpo", show_progress=False
        )


def test_bad_options_and_configs(tiny):
    with pytest.raises(ValueError, match=r"Unknown option\(s\) \['nitre'\]"):
        get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "rlpo", nitre=3)
    with pytest.raises(TypeError, match="'niter' .* must be int"):
        get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "rlpo", solver="randomized", niter=2.0)
    with pytest.raises(ValueError, match="solver='randomized' is not available for 'rlmo'"):
        get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "rlmo", solver="randomized")
    with pytest.raises(ValueError, match="only apply to this package's inits"):
        get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "olora", niter=3)
    with pytest.raises(ValueError, match="conflicts with method='rlpo'"):
        get_peft_model_with_init(copy.deepcopy(tiny), lora_config(init_lora_weights="pissa"), "rlpo")
    with pytest.raises(TypeError, match="must be a peft.LoraConfig"):
        get_peft_model_with_init(copy.deepcopy(tiny), {"r": 4}, "rlpo")
    peft_model = get_peft_model(copy.deepcopy(tiny), lora_config())
    with pytest.raises(TypeError, match="already a PeftModel"):
        get_peft_model_with_init(peft_model, lora_config(), "rlpo")
    with pytest.raises(ValueError, match="PEFT's own"):
        init_lora(peft_model, "olora")
    with pytest.raises(ValueError, match="no LoRA layer for adapter 'other'"):
        init_lora(peft_model, "rlpo", adapter_name="other")


def test_config_level_validation():
    check_lora_init_args(None, None)
    check_lora_init_args("rlpo", {"solver": "randomized", "niter": 4, "initial_adapter_dir": "x"})
    # the randomized solver's knobs without it would silently do nothing
    with pytest.raises(ValueError, match=r"Options \['niter'\] tune the randomized solver.*pass solver='randomized'"):
        check_lora_init_args("rlpo", {"niter": 4})
    with pytest.raises(ValueError, match="the minor subspace has no randomized solver"):
        check_lora_init_args("milora", {"solver": "gram", "oversampling": 8})
    check_lora_init_args("pissa_niter_8", None)
    with pytest.raises(ValueError, match="lora_init_kwargs is set but lora_init is not"):
        check_lora_init_args(None, {"niter": 4})
    with pytest.raises(ValueError, match="Unknown LoRA init"):
        check_lora_init_args("rlpx", None)
    with pytest.raises(TypeError, match="must be a dict"):
        check_lora_init_args("rlpo", "niter=4")
    with pytest.raises(ValueError, match="solver='full' is not available|solver='gram' is not available"):
        check_lora_init_args("pissa", {"solver": "gram"})


# ---------------------------------------------------------------------------------------------------- saving
@pytest.mark.parametrize("method", OURS)
def test_saved_adapter_loads_onto_original_base(tiny, ids, tmp_path, method):
    peft_model = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), method, show_progress=False)
    if RESIDUAL[method]:
        save_initial_adapter(peft_model, str(tmp_path / "init_adapter"))
    with torch.no_grad():  # "training": move every adapter weight
        g = torch.Generator().manual_seed(1)
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.add_(0.05 * torch.randn(param.shape, generator=g))
    trained = peft_model(ids).logits
    rng = torch.get_rng_state()
    out = save_converted_adapter(peft_model, str(tmp_path / "for_base"))
    # PEFT's conversion creates an adapter (drawing A from the torch generator): a training run's stream must not move
    assert torch.equal(torch.get_rng_state(), rng)
    reloaded = PeftModel.from_pretrained(copy.deepcopy(tiny), out)
    torch.testing.assert_close(reloaded(ids).logits, trained, atol=1e-5, rtol=1e-5)
    merged = reloaded.merge_and_unload()
    torch.testing.assert_close(merged(ids).logits, trained, atol=1e-5, rtol=1e-5)
    saved_r = reloaded.peft_config["default"].r
    assert saved_r == (8 if RESIDUAL[method] else 4)  # PEFT's conversion: [A; A₀], [B | −B₀]


def test_converted_adapter_needs_initial_adapter(tiny, tmp_path):
    peft_model = get_peft_model_with_init(copy.deepcopy(tiny), lora_config(), "milora", show_progress=False)
    with pytest.raises(ValueError, match="needs the adapter as it was at init"):
        save_converted_adapter(peft_model, str(tmp_path / "out"))
