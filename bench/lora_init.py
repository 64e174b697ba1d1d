"""Time and accuracy of the LoRA initialisers against PEFT's own PiSSA, side by side in one process.

    python bench/lora_init.py [--sizes 1024x1024,1024x2752] [--rank 16] [--repeats 5] [--decay 0.5] [--threads 1]
    python bench/lora_init.py --sizes 4096x4096,4096x11008 --repeats 1      # the 7B-sized layers (minutes)
    python bench/lora_init.py --device cuda --threads 0 --sizes 896x896,4864x896,4096x4096,4096x11008   # on a GPU
    python bench/lora_init.py --model smollm2-135m-instruct   # the solvers' subspace errors on every weight of a model
    python bench/lora_init.py --quick     # make bench-quick's run (bench/quick.py): small layers, 2 repeats

For each d_out x d_in size it builds one float32 linear layer W = U diag(s) Vᵀ with random orthonormal U, V and a
power-law spectrum s_i = i^(-decay) (pretrained transformer weights have heavy-tailed, power-law-like spectra), then
initialises a LoRA adapter on it with every contender, alternating their order from repeat to repeat:

* PEFT ``pissa`` (full ``torch.linalg.svd``) -- the baseline of every ratio -- and PEFT ``pissa_niter_4``;
* ours: ``rlpo`` (the default float32 full SVD, and the randomized solver with its default options), ``pissa`` (full
  and randomized), ``rlmo`` (the default float32 full SVD, and the float64 Gram solver) and ``milora`` (Gram).

Reported per contender: median wall time, speed-up against PEFT's full-SVD PiSSA (median over repeats of the
per-repeat ratios), the principal-angle error (sin of the largest principal angle) of the row space of A₀ to the
exact subspace it targets (top r for principal inits, bottom r for minor ones), and the energy error
|‖W·Q‖²_F / Σ σ² − 1| over the target triplets (Q an orthonormal basis of A₀'s rows): how much of the target
spectrum's energy the chosen directions miss (principal) or exceed (minor); unlike the angle it stays meaningful
when σ_r ≈ σ_{r+1} makes the exact subspace ill-defined. The exact subspaces come from a float64 SVD of W when max(d) <= 3000, else from the
construction (then the minor-subspace errors also contain the effect of rounding W to float32, which moves its
bottom singular vectors slightly: a floor of about 1e-5 at 4096).

With ``--device cuda`` the layer lives on the GPU, so every contender decomposes it there (the weight and its exact
subspaces are still built on the CPU in float64), and the timer synchronizes the device before reading the clock.

With ``--model NAME`` (a pretrained name or a local path) it instead scans every linear weight of that model
(``solver_errors``): the sine of the largest principal angle between the top-r subspace that each principal solver
finds (the default float32 full SVD, the authors' ``torch.linalg.svd(W.float())``, and the randomized option at its
default oversampling and iterations) and the one of a float64 SVD of the same weight, summarised per projection.

Targets (of the randomized option): RLPO >= 10x faster than full-SVD PiSSA with principal-angle error <= 1e-2; RLMO no slower than it.
"""

import argparse
import copy
import math
import statistics
import time

import torch
from peft import LoraConfig, get_peft_model
from torch import nn

from trl_rlvr_ext.lora_init import get_peft_model_with_init, principal_angle_error


try:  # run as a script (bench/ on sys.path) or imported as bench.lora_init
    from quick import quick_defaults
except ImportError:
    from bench.quick import quick_defaults


class OneLinear(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.proj = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            self.proj.weight.copy_(weight)


def synchronize(device: str):
    """Wait for queued CUDA kernels, so that a wall-clock timer measures them."""
    if device != "cpu":
        torch.cuda.synchronize()


def make_weight(d_out, d_in, decay, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = min(d_out, d_in)
    U = torch.linalg.qr(torch.randn(d_out, k, generator=g, dtype=torch.float64)).Q
    V = torch.linalg.qr(torch.randn(d_in, k, generator=g, dtype=torch.float64)).Q
    s = torch.arange(1, k + 1, dtype=torch.float64) ** (-decay)
    return ((U * s) @ V.T).float(), V.T, s


# name -> (target subspace, builder(module, config) -> PeftModel)
def contenders(rank):
    def peft(init):
        return lambda module, cfg: get_peft_model(module, LoraConfig(**cfg, init_lora_weights=init))

    def ours(method, **options):
        return lambda module, cfg: get_peft_model_with_init(
            module, LoraConfig(**cfg), method, show_progress=False, **options
        )

    return {
        "PEFT pissa (full SVD)": ("top", peft("pissa")),
        "PEFT pissa_niter_4": ("top", peft("pissa_niter_4")),
        "rlpo (full SVD f32)": ("top", ours("rlpo")),
        "rlpo (randomized)": ("top", ours("rlpo", solver="randomized")),
        "pissa (full)": ("top", ours("pissa")),
        "pissa (randomized)": ("top", ours("pissa", solver="randomized")),
        "rlmo (full SVD f32)": ("bottom", ours("rlmo")),
        "rlmo (gram f64)": ("bottom", ours("rlmo", solver="gram")),
        "milora (gram f64)": ("bottom", ours("milora", solver="gram")),
    }


def run_size(d_out, d_in, args, deadline: float = math.inf, weight=None, label=None):
    """Time every contender on one layer. Returns ({name: (median s, speed-up, subspace error, energy error)}, the
    number of repeats run).

    ``args`` needs ``rank``, ``repeats``, ``decay`` and (optionally) ``device``. Once ``time.monotonic()`` passes
    ``deadline``, no further repeat starts (at least one always runs). ``weight``: a given (d_out, d_in) weight, e.g.
    a pretrained model's, instead of the power-law construction (its exact subspaces from a float64 SVD); ``label``
    names it in the printout."""
    device = getattr(args, "device", "cpu")
    if weight is None:
        W, V_construct, s = make_weight(d_out, d_in, args.decay)
    else:
        W = weight.detach().float().cpu()
        if tuple(W.shape) != (d_out, d_in):
            raise ValueError(f"weight has shape {tuple(W.shape)}, not ({d_out}, {d_in})")
    r = args.rank
    if weight is not None or max(d_out, d_in) <= 3000:
        _, S_ref, Vh_ref = torch.linalg.svd(W.double(), full_matrices=False)
        reference = "float64 SVD of W"
    else:
        S_ref, Vh_ref = s, V_construct
        reference = "construction (minor errors include the float32 rounding of W)"
    targets = {"top": (Vh_ref[:r], S_ref[:r]), "bottom": (Vh_ref[-r:], S_ref[-r:])}
    cfg = {"r": r, "lora_alpha": 2 * r, "target_modules": ["proj"]}
    entries = contenders(r)
    names = list(entries)
    times = {name: [] for name in names}
    errors, energies = {}, {}
    base = OneLinear(W).to(device)
    repeats = 0
    for repeat in range(args.repeats):
        if repeat > 0 and time.monotonic() > deadline:
            break
        repeats += 1
        order = names[repeat % len(names) :] + names[: repeat % len(names)]  # alternate who runs first
        for name in order:
            module = copy.deepcopy(base)
            synchronize(device)
            start = time.perf_counter()
            model = entries[name][1](module, cfg)
            synchronize(device)
            times[name].append(time.perf_counter() - start)
            if repeat == 0:
                A = model.base_model.model.proj.lora_A["default"].weight.detach().cpu()
                ref_vh, ref_s = targets[entries[name][0]]
                errors[name] = principal_angle_error(A, ref_vh)
                Q = torch.linalg.qr(A.double().T).Q
                energies[name] = abs(float((W.double() @ Q).square().sum() / ref_s.square().sum()) - 1)
            del model, module
    baseline = "PEFT pissa (full SVD)"
    what = label or f"spectrum i^-{args.decay}"
    print(f"\n== {d_out}x{d_in}, r={r}, {what}, {repeats} repeat(s) on {device}; reference: {reference}")
    print(f"{'contender':24s} {'median s':>9s} {'speed-up':>9s} {'subspace err':>13s} {'energy err':>11s}")
    summary = {}
    for name in names:
        speedup = statistics.median(b / t for b, t in zip(times[baseline], times[name]))
        summary[name] = (statistics.median(times[name]), speedup, errors[name], energies[name])
        print(f"{name:24s} {summary[name][0]:9.3f} {speedup:8.1f}x {errors[name]:13.2e} {energies[name]:11.2e}")
    return summary, repeats


def solver_errors(model_path: str, rank: int, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """{projection name: {"full": [errors], "randomized": [errors]}} over every linear weight of a model's layers.

    Each error is the sine of the largest principal angle between the top-``rank`` right singular subspace a solver
    finds (the options' defaults; one seeded generator per weight, as ``init_lora`` seeds one per model) and a float64
    SVD's. Prints the median and the largest error per projection and solver, and the worst weight of each solver."""
    from transformers import AutoModelForCausalLM

    from trl_rlvr_ext.lora_init.decomposition import top_singular_triplets
    from trl_rlvr_ext.lora_init.options import DEFAULT_OPTIONS

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    errors: dict[str, dict[str, list[float]]] = {}
    worst = {"full": (0.0, ""), "randomized": (0.0, "")}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or name.endswith("lm_head") or min(module.weight.shape) <= rank:
            continue
        W = module.weight.detach()
        reference = torch.linalg.svd(W.double(), full_matrices=False).Vh[:rank]
        projection = name.rsplit(".", 1)[-1]
        for solver in ("full", "randomized"):
            generator = torch.Generator().manual_seed(seed)
            Vh = top_singular_triplets(
                W, rank, solver, DEFAULT_OPTIONS["oversampling"], DEFAULT_OPTIONS["niter"], generator
            )[2]
            error = principal_angle_error(Vh, reference)
            errors.setdefault(projection, {"full": [], "randomized": []})[solver].append(error)
            if error > worst[solver][0]:
                worst[solver] = (error, f"{name} {tuple(W.shape)}")
    print(f"\n== top-{rank} subspace error (sine of the largest principal angle to a float64 SVD), every layer")
    print(
        f"{'projection':12s} {'weights':>7s} {'full median':>12s} {'full max':>9s} {'rand. median':>13s} {'rand. max':>10s}"
    )
    for projection, by_solver in errors.items():
        full, rand = by_solver["full"], by_solver["randomized"]
        print(
            f"{projection:12s} {len(full):7d} {statistics.median(full):12.1e} {max(full):9.1e} "
            f"{statistics.median(rand):13.1e} {max(rand):10.1e}"
        )
    for solver, (error, where) in worst.items():
        print(f"worst {solver}: {error:.2e} at {where}")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1024x1024,1024x2752", help="comma-separated d_outxd_in sizes")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--decay", type=float, default=0.5, help="power-law exponent of the spectrum s_i = i^-decay")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: stable timings on a shared machine; 0: torch default)",
    )
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="where the layer (and the init) lives"
    )
    parser.add_argument(
        "--model", default=None, help="scan the solvers' subspace errors on every linear weight of this model instead"
    )
    quick_defaults(parser, None, sizes="256x256,256x688", repeats=2)
    args = parser.parse_args()
    if args.model is not None:
        from trl_rlvr_ext.data import resolve_model_name_or_path

        if args.threads > 0:
            torch.set_num_threads(args.threads)
        solver_errors(resolve_model_name_or_path(args.model), args.rank)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here.")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {where}")
    results = {}
    for size in args.sizes.split(","):
        d_out, d_in = (int(x) for x in size.lower().split("x"))
        results[size], _ = run_size(d_out, d_in, args)
    print("\nTargets (vs PEFT's full-SVD pissa; RLPO's 10x is set for 4096-wide layers, where a full SVD is costly):")
    for size, summary in results.items():
        _, rlpo_speedup, rlpo_err, _ = summary["rlpo (randomized)"]
        _, rlmo_speedup, _, _ = summary["rlmo (gram f64)"]
        d_min = min(int(x) for x in size.lower().split("x"))
        if d_min >= 4096:
            verdict = "met" if rlpo_speedup >= 10 and rlpo_err <= 1e-2 else "NOT met"
        else:
            verdict = "target defined at 4096; error " + ("met" if rlpo_err <= 1e-2 else "NOT met")
        print(
            f"  {size}: randomized RLPO {rlpo_speedup:.1f}x faster, error {rlpo_err:.1e} [>= 10x, <= 1e-2: {verdict}]; "
            f"Gram RLMO {rlmo_speedup:.2f}x [>= 1x: {'met' if rlmo_speedup >= 1 else 'NOT met'}]"
        )


if __name__ == "__main__":
    main()
