"""Names and options of the LoRA initialisers, validated without importing torch (configs call this).

Our methods (https://huggingface.co/papers/2606.31813, §4 of the design notes):

| method  | subspace  | A₀                  | B₀              | base weight   |
|---------|-----------|---------------------|-----------------|---------------|
| rlpo    | principal | Vᴴ[:r]              | 0               | unchanged     |
| rlmo    | minor     | Vᴴ[-r:]             | 0               | unchanged     |
| pissa   | principal | √(S_r/γ)·Vᴴ[:r]     | U[:, :r]·√(S_r/γ) | W − γ·B₀A₀  |
| milora  | minor     | same, bottom r      | same            | W − γ·B₀A₀    |

PEFT's own ``init_lora_weights`` values that need no data or preprocessing pass through to PEFT unchanged.
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MethodSpec:
    name: str
    subspace: str  # "principal" or "minor"
    rewrites_base: bool  # PiSSA-style: the base weight becomes W − γ·B₀A₀
    default_solver: str
    solvers: tuple[str, ...]


# Every default is the authors' decomposition: a float32 thin SVD of the whole weight, `torch.linalg.svd(W.float(),
# full_matrices=False)` (RLPO/RLMO/MiLoRA: Richard-ZZZ/geometry-preserving-orthonormal-init-rlvr@949965f,
# scripts/prepare_init_adapters.py, `select_svd_components`; PiSSA: PEFT's `pissa_init`). "randomized" (principal) and
# "gram" (minor) are faster options that land elsewhere on slowly decaying spectra (see decomposition.py).
METHODS: dict[str, MethodSpec] = {
    "rlpo": MethodSpec("rlpo", "principal", False, "full", ("full", "randomized")),
    "rlmo": MethodSpec("rlmo", "minor", False, "full", ("full", "gram")),
    "pissa": MethodSpec("pissa", "principal", True, "full", ("full", "randomized")),
    "milora": MethodSpec("milora", "minor", True, "full", ("full", "gram")),
}

# PEFT values we hand to `LoraConfig(init_lora_weights=...)` untouched. `pissa_niter_K` is PEFT's randomized PiSSA
# (no oversampling); plain "pissa" is ours (same factors as PEFT's, plus bitsandbytes support and solver options).
PEFT_PASSTHROUGH = ("true", "gaussian", "olora", "orthogonal", "mica")
_PEFT_PISSA_NITER = re.compile(r"^pissa_niter_\d+$")
# PEFT inits that mutate the base weight (after them, "adapters disabled" is no longer the original model).
PEFT_REWRITES_BASE = ("olora",)
# PEFT values we refuse, with the reason and what to do instead.
PEFT_REFUSED = {
    "false": "init_lora_weights=False leaves B random, so the policy at step 0 (and TRL's reference copy of the "
    "adapter) is not the base model; it exists for debugging only.",
    "eva": "EVA is data-driven: it needs `peft.initialize_lora_eva_weights(peft_model, dataloader)` after creation.",
    "corda": "CorDA needs `peft.tuners.lora.corda.preprocess_corda(model, config, run_model=...)` first.",
    "lora_ga": "LoRA-GA needs `peft.tuners.lora.preprocess_loraga(...)` (gradients of a batch) first.",
    "loftq": "LoftQ must quantize the model itself (pass an unquantized model and a LoftQConfig to PEFT).",
}

# Option name -> (type, default or None meaning "per method"), for our four methods.
OPTION_TYPES: dict[str, type | tuple[type, ...]] = {
    "solver": str,
    "oversampling": int,
    "niter": int,
    "seed": int,
    "requantize": bool,
    "show_progress": bool,
}
DEFAULT_OPTIONS = {"oversampling": 32, "niter": 12, "seed": 0, "requantize": False, "show_progress": True}
# Options only read by the trainer integration (not by `init_lora` itself).
TRAINER_OPTIONS = {"initial_adapter_dir": str, "save_initial_adapter": bool, "export_converted_adapter": bool}


def normalize_method(method) -> str:
    """Canonical lower-case name of an init: ours, or a PEFT ``init_lora_weights`` value (``True`` -> ``"true"``)."""
    if isinstance(method, bool):
        return "true" if method else "false"
    if not isinstance(method, str):
        raise TypeError(f"The LoRA init must be a string (e.g. 'rlpo'), got {type(method).__name__}: {method!r}.")
    name = method.strip().lower()
    return "true" if name in ("lora", "default") else name


def is_ours(method) -> bool:
    return normalize_method(method) in METHODS


def is_peft_passthrough(method) -> bool:
    name = normalize_method(method)
    return name in PEFT_PASSTHROUGH or bool(_PEFT_PISSA_NITER.match(name))


def rewrites_base(method) -> bool:
    """Whether the init rewrites the base weight (then the adapter-off model is not the original one)."""
    name = normalize_method(method)
    if name in METHODS:
        return METHODS[name].rewrites_base
    return name in PEFT_REWRITES_BASE or bool(_PEFT_PISSA_NITER.match(name))


def supported_methods() -> list[str]:
    return [*METHODS, *PEFT_PASSTHROUGH, "pissa_niter_<K>"]


def check_method(method) -> str:
    """Validate an init name; returns the canonical name, raises ``ValueError`` saying what to use instead."""
    name = normalize_method(method)
    if name in METHODS or is_peft_passthrough(name):
        return name
    if name in PEFT_REFUSED:
        raise ValueError(
            f"LoRA init {method!r} is not supported here: {PEFT_REFUSED[name]} Build the PeftModel with PEFT yourself "
            "and pass it to the trainer, or use one of " + ", ".join(supported_methods()) + "."
        )
    raise ValueError(f"Unknown LoRA init {method!r}. Use one of: {', '.join(supported_methods())}.")


def check_options(method, options: dict | None, allow_trainer_options: bool = False) -> dict:
    """Validate the options of an init and fill in the defaults; returns a new dict.

    Our methods accept ``solver`` ('full', the default: the authors' float32 thin SVD; or 'randomized' for principal
    subspaces, 'gram' for minor ones), ``oversampling`` and ``niter`` (randomized solver), ``seed``, ``requantize`` (residual inits on a
    bitsandbytes base) and ``show_progress``. PEFT pass-through inits take no options.
    """
    name = check_method(method)
    options = dict(options or {})
    allowed = dict(TRAINER_OPTIONS) if allow_trainer_options else {}
    if name in METHODS:
        allowed.update(OPTION_TYPES)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        if name not in METHODS and not set(unknown) - set(OPTION_TYPES):
            raise ValueError(
                f"Options {unknown} only apply to this package's inits ({', '.join(METHODS)}); PEFT's {name!r} "
                "takes none. Remove them."
            )
        raise ValueError(f"Unknown option(s) {unknown} for LoRA init {name!r}. Allowed: {sorted(allowed)}.")
    for key, value in options.items():
        expected = allowed[key]
        # bool is an int subclass: reject True for an integer option explicitly
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise TypeError(f"Option {key!r} of LoRA init {name!r} must be {expected.__name__}, got {value!r}.")
    if name not in METHODS:
        return options
    spec = METHODS[name]
    resolved = {"solver": spec.default_solver, **DEFAULT_OPTIONS, **options}
    if resolved["solver"] not in spec.solvers:
        hint = " (randomized methods only find the top of the spectrum)" if spec.subspace == "minor" else ""
        raise ValueError(
            f"solver={resolved['solver']!r} is not available for {name!r}{hint}. Use one of {list(spec.solvers)}."
        )
    # Non-default knobs of the randomized solver with another solver would do nothing (defaults pass: resolved options
    # are validated again when re-applied, e.g. by `init_lora` or from a saved `lora_init.json`).
    tuning = sorted(
        key for key in ("oversampling", "niter") if options.get(key, DEFAULT_OPTIONS[key]) != DEFAULT_OPTIONS[key]
    )
    if tuning and resolved["solver"] != "randomized":
        fix = (
            "pass solver='randomized'"
            if "randomized" in spec.solvers
            else "the minor subspace has no randomized solver"
        )
        raise ValueError(
            f"Options {tuning} tune the randomized solver, but {name!r} uses solver={resolved['solver']!r} (the "
            f"default is the authors' full SVD), where they would do nothing. Remove them, or {fix}."
        )
    if resolved["oversampling"] < 0 or resolved["niter"] < 0:
        raise ValueError(
            f"oversampling and niter must be >= 0, got oversampling={resolved['oversampling']}, "
            f"niter={resolved['niter']}."
        )
    return resolved
