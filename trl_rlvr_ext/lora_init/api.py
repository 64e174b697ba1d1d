"""Public entry points: ``get_peft_model_with_init`` (build + initialise) and ``init_lora`` (initialise in place).

PEFT has no registry for new initialisers, so ours run after ``get_peft_model`` (the pattern PEFT itself uses for
EVA): create the adapter with ``init_lora_weights=True``, overwrite A and B (and, for PiSSA/MiLoRA, the base weight)
layer by layer inside ``gather_params_ctx`` (DeepSpeed ZeRO-3), then leave ``init_lora_weights=True`` in the adapter
config, so that nothing re-runs an init on the rewritten weights: not TRL's ``add_adapter("ref", config)``, not
``PeftModel.from_pretrained``.
"""

import copy
import os
import warnings
from dataclasses import asdict, dataclass, field

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils.integrations import gather_params_ctx, get_bnb_param_type
from tqdm.auto import tqdm

from .layers import (
    check_rank,
    check_readable,
    find_lora_layers,
    quantization_of,
    read_base_weight,
    write_adapter,
    write_base_weight,
)
from .methods import lora_factors
from .options import METHODS, check_method, check_options, is_peft_passthrough, normalize_method, rewrites_base


LORA_INIT_ATTR = "trl_rlvr_ext_lora_init"
PAPER_URL = "https://huggingface.co/papers/2606.31813"


@dataclass
class LoraInitInfo:
    """What was done to one adapter; kept on the PeftModel (``get_lora_init_info``) and saved as ``lora_init.json``."""

    method: str
    adapter_name: str
    rewrites_base: bool
    options: dict = field(default_factory=dict)
    initial_adapter_dir: str | None = None
    quantized_layers: int = 0
    max_requantization_error: float | None = None  # max |Q(W_res) + γ·B₀A₀ − Q(W)| over re-quantised layers

    def to_dict(self) -> dict:
        return asdict(self)


def get_lora_init_info(model, adapter_name: str = "default") -> LoraInitInfo | None:
    """The ``LoraInitInfo`` recorded by ``init_lora``/``get_peft_model_with_init`` for ``adapter_name``, or None."""
    return getattr(model, LORA_INIT_ATTR, {}).get(adapter_name)


def _record(model, info: LoraInitInfo) -> None:
    records = dict(getattr(model, LORA_INIT_ATTR, {}))
    records[info.adapter_name] = info
    setattr(model, LORA_INIT_ATTR, records)


def _is_main_local_process() -> bool:
    return int(os.environ.get("LOCAL_RANK", "0")) == 0


@torch.no_grad()
def init_lora(peft_model: PeftModel, method: str, adapter_name: str = "default", **options) -> PeftModel:
    """Initialise the LoRA adapter ``adapter_name`` of ``peft_model`` in place with ``method``; returns the model.

    Args:
        peft_model: a ``PeftModel`` (or LoRA-injected module) whose adapter was created with
            ``init_lora_weights=True``; every layer of the adapter must wrap a linear layer.
        method: ``"rlpo"``, ``"rlmo"`` (https://huggingface.co/papers/2606.31813), ``"pissa"`` or ``"milora"``.
        adapter_name: the adapter to initialise.
        **options: ``solver`` (default ``"full"`` for every method: the authors' float32 thin SVD; or
            ``"randomized"`` for rlpo and pissa, faster but up to 0.36 away from the exact top-16 subspace on
            SmolLM2-135M's weights; or ``"gram"`` for rlmo and milora, float64 and more accurate at the bottom of a
            spectrum than the authors' float32 SVD), ``oversampling`` (32) and ``niter`` (12) for the randomized solver, ``seed`` (0), ``requantize`` (False: pissa/milora refuse a bitsandbytes base
            unless True, because re-quantising the residual changes the model), ``show_progress`` (True).

    The factors are computed in float64 for a float64 base weight and in float32 otherwise (float16/bfloat16 and
    dequantised weights are upcast; the Gram solver always forms its Gram matrix in float64) and cast to the adapter
    dtype; PiSSA/MiLoRA then set the base weight to W − γ·B₀A₀ computed from the *cast* factors. A seeded
    CPU generator drives the randomized and Gram solvers, and under ZeRO-3 rank 0's factors are broadcast, so every
    rank holds the same factors.
    """
    name = check_method(method)
    if name not in METHODS:
        raise ValueError(
            f"init_lora applies this package's inits ({', '.join(METHODS)}); {method!r} is PEFT's own: set it as "
            "`LoraConfig(init_lora_weights=...)` or use `get_peft_model_with_init`."
        )
    opts = check_options(name, options)
    spec = METHODS[name]
    layers = find_lora_layers(peft_model, adapter_name)
    # Validate everything before touching any weight: a half-initialised model is worse than an error.
    for layer_name, layer in layers:
        check_rank(layer_name, layer, adapter_name)
        check_readable(layer_name, layer)
    quantized = [layer_name for layer_name, layer in layers if quantization_of(layer)]
    if quantized and spec.rewrites_base and not opts["requantize"]:
        raise ValueError(
            f"{name!r} rewrites the base weight (W − γ·B₀A₀), but {len(quantized)} target layers are bitsandbytes-"
            f"quantised (e.g. {quantized[0]!r}). Re-quantising the residual changes the model by the quantisation "
            "error, so the starting policy and the reference are no longer exactly the quantised model. Either use "
            "'rlpo'/'rlmo' (base untouched), pass requantize=True to accept that, or decompose the unquantised model, "
            "save the residual and quantise it (PEFT's PiSSA recipe)."
        )

    generator = torch.Generator(device="cpu").manual_seed(opts["seed"])
    max_requant_error = None
    show = opts["show_progress"] and _is_main_local_process()
    for layer_name, layer in tqdm(layers, desc=f"LoRA init ({name})", disable=not show):
        base = layer.get_base_layer()
        params = [base.weight, layer.lora_A[adapter_name].weight, layer.lora_B[adapter_name].weight]
        # ZeRO-3: gather the partitioned weights; rank 0's writes are broadcast on exit (all ranks compute the same).
        with gather_params_ctx(params, modifier_rank=0):
            weight = read_base_weight(layer, layer_name)
            factors = lora_factors(
                name,
                weight,
                layer.r[adapter_name],
                layer.scaling[adapter_name],
                solver=opts["solver"],
                oversampling=opts["oversampling"],
                niter=opts["niter"],
                generator=generator,
            )
            stored_A, stored_B = write_adapter(layer, adapter_name, factors.lora_A, factors.lora_B)
            if factors.rewrites_base:
                delta = layer.scaling[adapter_name] * (stored_B.to(weight) @ stored_A.to(weight))
                write_base_weight(layer, weight - delta)
                if quantization_of(layer):
                    error = float((read_base_weight(layer, layer_name) + delta - weight).abs().max())
                    max_requant_error = error if max_requant_error is None else max(max_requant_error, error)

    # Nothing may re-run an init on these weights (TRL's add_adapter("ref", config), PeftModel.from_pretrained).
    peft_model.peft_config[adapter_name].init_lora_weights = True
    if max_requant_error is not None:
        warnings.warn(
            f"LoRA init {name!r} re-quantised {len(quantized)} bitsandbytes weights: the initial model differs from "
            f"the quantised original by up to {max_requant_error:.3g} per weight entry (the quantisation error).",
            stacklevel=2,
        )
    _record(
        peft_model,
        LoraInitInfo(
            method=name,
            adapter_name=adapter_name,
            rewrites_base=spec.rewrites_base,
            options=opts,
            quantized_layers=len(quantized),
            max_requantization_error=max_requant_error,
        ),
    )
    return peft_model


def _has_bnb_weights(model: torch.nn.Module) -> bool:
    return any(get_bnb_param_type(param) for param in model.parameters())


def get_peft_model_with_init(
    model: torch.nn.Module,
    lora_config: LoraConfig,
    method: str,
    adapter_name: str = "default",
    autocast_adapter_dtype: bool = True,
    **options,
) -> PeftModel:
    """Wrap ``model`` with a LoRA adapter initialised by ``method``; the one entry point of this module.

    Args:
        model: a transformers (or any torch) model, not already a ``PeftModel``.
        lora_config: the ``peft.LoraConfig`` (rank, α, target modules, rsLoRA, ...). Leave its
            ``init_lora_weights`` at the default ``True``: the init is chosen by ``method``.
        method: ``"rlpo"``, ``"rlmo"``, ``"pissa"``, ``"milora"`` (see ``init_lora``), or one of PEFT's own values
            that need no data, passed to PEFT unchanged: ``True``, ``"gaussian"``, ``"olora"``, ``"orthogonal"``,
            ``"mica"``, ``"pissa_niter_K"``.
        adapter_name: name of the adapter to create.
        autocast_adapter_dtype: forwarded to ``peft.get_peft_model`` (TRL passes False under DeepSpeed ZeRO-3).
        **options: options of ``init_lora`` (our methods only).

    Returns:
        The ``PeftModel``. Its adapter config says ``init_lora_weights=True`` (except PEFT's ``"mica"``, whose config
        value selects a LoRA variant and whose init does not touch the base), so that TRL's frozen "ref" copy of the
        adapter and ``PeftModel.from_pretrained`` never re-run an init on rewritten weights.
    """
    if not isinstance(lora_config, LoraConfig):
        raise TypeError(f"lora_config must be a peft.LoraConfig, got {type(lora_config).__name__}.")
    if isinstance(model, PeftModel):
        raise TypeError(
            "The model is already a PeftModel. Pass the base model: the adapter is created and initialised here."
        )
    name = check_method(method)
    opts = check_options(name, options)
    config_init = normalize_method(lora_config.init_lora_weights)
    if config_init != "true" and config_init != name:
        raise ValueError(
            f"lora_config.init_lora_weights={lora_config.init_lora_weights!r} conflicts with method={method!r}. Leave "
            "init_lora_weights at its default (True) and choose the init with `method`."
        )
    if name.startswith("pissa_niter_") and _has_bnb_weights(model):
        raise ValueError(
            f"PEFT's {name!r} cannot decompose bitsandbytes-quantised weights (it either refuses them or, with a "
            "bfloat16 quant storage, silently decomposes the packed storage). Use method='pissa' with "
            "solver='randomized' (dequantises first) and requantize=True."
        )
    config = copy.deepcopy(lora_config)
    config.init_lora_weights = True if name in METHODS or name == "true" else name
    peft_model = get_peft_model(
        model, config, adapter_name=adapter_name, autocast_adapter_dtype=autocast_adapter_dtype
    )
    if name in METHODS:
        return init_lora(peft_model, name, adapter_name=adapter_name, **opts)
    assert is_peft_passthrough(name)
    if name != "mica":  # mica's value selects PEFT's MiCA variant; its init reads the base but never rewrites it
        peft_model.peft_config[adapter_name].init_lora_weights = True
    _record(peft_model, LoraInitInfo(method=name, adapter_name=adapter_name, rewrites_base=rewrites_base(name)))
    return peft_model
