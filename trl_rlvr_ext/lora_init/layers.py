"""Reading and writing the weights of one LoRA layer: plain, bitsandbytes 4/8-bit, fan_in_fan_out, DeepSpeed ZeRO-3.

Quantisation is detected from the parameter's class (``peft.utils.integrations.get_bnb_param_type``), never from its
dtype: a 4-bit weight stored with ``bnb_4bit_quant_storage=torch.bfloat16`` (the FSDP-QLoRA setting) reports dtype
bfloat16 while holding packed 4-bit data.
"""

import torch
from peft.tuners.lora import LoraLayer
from peft.utils.integrations import dequantize_bnb_weight, get_bnb_param_type
from peft.utils.other import transpose
from torch import nn

from .decomposition import working_dtype


FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _is_conv1d(module: nn.Module) -> bool:
    # transformers' GPT-2 style Conv1D is a linear layer stored (d_in, d_out); PEFT handles it with fan_in_fan_out.
    return type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None


def find_lora_layers(model: nn.Module, adapter_name: str) -> list[tuple[str, LoraLayer]]:
    """All LoRA layers of ``adapter_name``; raises if one of them does not wrap a linear layer.

    The initialisers need a 2-D weight (d_out, d_in): embeddings, convolutions and ``target_parameters``
    (``ParamWrapper``, MoE expert tensors) are refused with the module's name, so the user can drop it from
    ``target_modules``.
    """
    layers = []
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        has_adapter = adapter_name in module.lora_A or adapter_name in getattr(module, "lora_embedding_A", {})
        if not has_adapter:
            continue
        base = module.get_base_layer()
        is_linear = isinstance(base, nn.Linear) or _is_conv1d(base)
        if (
            not is_linear
            or adapter_name not in module.lora_A
            or not isinstance(module.lora_A[adapter_name], nn.Linear)
            or type(module).__name__ == "ParamWrapper"
        ):
            raise ValueError(
                f"LoRA init needs linear target modules, but {name!r} wraps a {type(base).__name__} (LoRA layer "
                f"{type(module).__name__}). Remove it from `target_modules` (e.g. use target_modules='all-linear' or "
                "list the projection names), or drop `target_parameters`."
            )
        layers.append((name, module))
    if not layers:
        raise ValueError(f"The model has no LoRA layer for adapter {adapter_name!r}: nothing to initialise.")
    return layers


def check_rank(name: str, layer: LoraLayer, adapter_name: str) -> None:
    r, d_out, d_in = layer.r[adapter_name], layer.out_features, layer.in_features
    if r > min(d_out, d_in):
        raise ValueError(
            f"LoRA rank r={r} is larger than min(d_out, d_in) = min({d_out}, {d_in}) = {min(d_out, d_in)} for "
            f"{name!r}: a weight of that shape has only {min(d_out, d_in)} singular vectors. Lower `r`, or give this "
            "module a smaller rank with `rank_pattern`."
        )


def quantization_of(layer: LoraLayer) -> str | bool:
    """``"4bit"``, ``"8bit"`` (bitsandbytes) or ``False``; by class, not dtype."""
    return get_bnb_param_type(layer.get_base_layer().weight)


def check_readable(name: str, layer: LoraLayer) -> None:
    """Raise if the base weight cannot be read reliably (called for every layer before anything is written)."""
    base = layer.get_base_layer()
    # bitsandbytes >= 0.48 repacks a 4-bit weight into an AVX512-BF16 layout during a CPU forward in eval mode without
    # gradients (Linear4bit.forward), and casts its absmax to bfloat16. Its inverse
    # (_convert_weight_packed_for_cpu_inverse) is best-effort: it keeps the bf16 absmax and, without double
    # quantisation, leaves absmax transposed when d_in > blocksize (measured: wrong weights in such layers), so such
    # a weight cannot be read back reliably.
    state = getattr(base.weight, "quant_state", None)
    if quantization_of(layer) == "4bit" and state is not None and getattr(state, "packing_format_for_cpu", False):
        raise RuntimeError(
            f"The 4-bit weight of {name!r} was repacked by bitsandbytes for CPU inference (an eval-mode forward "
            "without gradients ran before the LoRA init), and that layout cannot be dequantised reliably. Initialise "
            "the adapter right after loading the quantised model, before any inference (the trainers do)."
        )
    if not quantization_of(layer) and base.weight.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"Cannot read the base weight of {name!r}: dtype {base.weight.dtype} ({type(base.weight).__name__}); "
            "supported are float64/float32/float16/bfloat16 and bitsandbytes 4-bit/8-bit weights."
        )


def read_base_weight(layer: LoraLayer, name: str = "") -> torch.Tensor:
    """The base weight as a (d_out, d_in) matrix in its working dtype (``decomposition.working_dtype``: float64 for a
    float64 weight, float32 otherwise), dequantised if bitsandbytes. Call inside the gather ctx."""
    check_readable(name, layer)
    base = layer.get_base_layer()
    if quantization_of(layer):
        # PEFT's dequantize_bnb_weight, not dequantize_module_weight: on CPU the latter re-assigns an 8-bit weight
        # through Int8Params.to(), which drops SCB, and the next forward of the layer then fails.
        weight = dequantize_bnb_weight(base.weight, state=getattr(base, "state", None))
    else:
        weight = base.weight
    return transpose(weight.detach().to(working_dtype(weight.dtype)), layer.fan_in_fan_out)


def write_base_weight(layer: LoraLayer, weight: torch.Tensor) -> None:
    """Store a (d_out, d_in) matrix as the base weight in the base's dtype, re-quantising a bitsandbytes weight."""
    base = layer.get_base_layer()
    orig = base.weight
    weight = transpose(weight, layer.fan_in_fan_out).contiguous()
    quant = get_bnb_param_type(orig)
    if quant == "4bit":
        # Same pattern as PEFT's olora_init: a new Params4bit with the original quantisation settings, quantised by
        # `.to(device)`; `module=` keeps Linear4bit.quant_state pointing at the new state.
        new = orig.__class__(
            weight.to(orig.quant_state.dtype).cpu(),
            requires_grad=False,
            quant_type=orig.quant_type,
            quant_storage=orig.quant_storage,
            compress_statistics=orig.compress_statistics,
            blocksize=orig.blocksize,
            module=base,
        ).to(orig.device)
        base.weight = new
    elif quant == "8bit":
        new = orig.__class__(
            weight.to(torch.float16).cpu(), requires_grad=orig.requires_grad, has_fp16_weights=orig.has_fp16_weights
        ).to(orig.device)
        base.weight = new
        # Linear8bitLt caches CB/SCB in `state`; drop the stale ones so the next forward/dequantise reads the new.
        state = getattr(base, "state", None)
        if state is not None:
            state.CB, state.SCB = None, None
    else:
        with torch.no_grad():
            orig.data.copy_(weight.to(orig.dtype))


def write_adapter(layer: LoraLayer, adapter_name: str, lora_A: torch.Tensor, lora_B: torch.Tensor):
    """Copy the factors into the adapter (keeping its Parameter objects and dtype); returns the values as stored."""
    a_param, b_param = layer.lora_A[adapter_name].weight, layer.lora_B[adapter_name].weight
    if a_param.device.type == "meta" or b_param.device.type == "meta":
        raise ValueError(
            "The adapter weights are on the meta device (created with low_cpu_mem_usage=True): create the PeftModel "
            "with real weights before initialising it."
        )
    with torch.no_grad():
        a_param.data.copy_(lora_A.to(device=a_param.device, dtype=a_param.dtype))
        b_param.data.copy_(lora_B.to(device=b_param.device, dtype=b_param.dtype))
    return a_param.data, b_param.data
