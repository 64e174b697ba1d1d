"""LoRA initialisers on bitsandbytes 4-bit / 8-bit bases (bitsandbytes runs on CPU)."""

import warnings

import pytest
import torch
from peft import LoraConfig
from peft.utils.integrations import dequantize_bnb_weight


bnb = pytest.importorskip("bitsandbytes")

from transformers import AutoModelForCausalLM, BitsAndBytesConfig  # noqa: E402

from trl_rlvr_ext.lora_init import get_lora_init_info, get_peft_model_with_init, principal_angle_error  # noqa: E402
from trl_rlvr_ext.toy import save_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # hidden size a multiple of bitsandbytes' 64-wide quantisation blocks
    path = tmp_path_factory.mktemp("tiny64")
    return save_tiny_model(path, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(3, 250, (2, 9), generator=torch.Generator().manual_seed(0))


def load(model_dir, kind="4bit"):
    if kind == "8bit":
        config = BitsAndBytesConfig(load_in_8bit=True)
    else:
        storage = {"bnb_4bit_quant_storage": torch.bfloat16} if kind == "4bit_bf16_storage" else {}
        config = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32, **storage
        )
    model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=config, device_map="cpu")
    # Train mode: bitsandbytes only repacks 4-bit weights for CPU inference in eval mode (see the last tests).
    return model.train()


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def quantized_layers(model):
    return {n: m for n, m in model.named_modules() if type(m).__name__ in ("Linear4bit", "Linear8bitLt")}


def dequantized(module):
    return dequantize_bnb_weight(module.weight, state=getattr(module, "state", None)).float()


def key(name):
    """Name of a layer in the plain model, from its name in the PeftModel (LoRA layer or its base layer)."""
    return name.removeprefix("base_model.model.").removesuffix(".base_layer")


def cfg():
    return LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")


@pytest.mark.parametrize("kind", ["4bit", "4bit_bf16_storage"])
def test_rlpo_on_4bit(model_dir, ids, kind):
    model = load(model_dir, kind)
    expected = logits(model, ids)
    # packed bits compared as bytes (a bf16 view of packed 4-bit data holds NaN patterns)
    before = {n: (m.weight.data.view(torch.uint8).clone(), dequantized(m)) for n, m in quantized_layers(model).items()}
    if kind == "4bit_bf16_storage":  # the trap: a packed 4-bit weight that reports dtype bfloat16
        assert next(iter(quantized_layers(model).values())).weight.dtype == torch.bfloat16
    peft_model = get_peft_model_with_init(model, cfg(), "rlpo", show_progress=False)
    torch.testing.assert_close(logits(peft_model, ids), expected, atol=0, rtol=0)  # B₀ = 0, base untouched
    for name, layer in quantized_layers(peft_model).items():
        packed, _ = before[key(name)]
        assert type(layer.weight).__name__ == "Params4bit" and torch.equal(layer.weight.data.view(torch.uint8), packed)
    for name, module in peft_model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            A = module.lora_A["default"].weight
            torch.testing.assert_close(A @ A.T, torch.eye(4), atol=1e-5, rtol=0)
            W = before[key(name)][1]
            _, _, Vh = torch.linalg.svd(W.double(), full_matrices=False)
            assert principal_angle_error(A, Vh[:4]) < 1e-3  # decomposed the dequantised weight


@pytest.mark.parametrize("kind", ["4bit", "4bit_bf16_storage"])
def test_residual_init_refuses_quantized_base_by_default(model_dir, kind):
    model = load(model_dir, kind)
    with pytest.raises(ValueError, match="bitsandbytes-quantised.*requantize=True"):
        get_peft_model_with_init(model, cfg(), "pissa", show_progress=False)


def test_pissa_on_4bit_requantizes_correctly(model_dir, ids):
    model = load(model_dir, "4bit")
    expected = logits(model, ids)
    originals = {n: dequantized(m) for n, m in quantized_layers(model).items()}
    with pytest.warns(UserWarning, match="re-quantised 14 bitsandbytes weights"):
        peft_model = get_peft_model_with_init(model, cfg(), "pissa", requantize=True, show_progress=False)
    info = get_lora_init_info(peft_model)
    assert info.quantized_layers == 14 and 0 < info.max_requantization_error < 0.1
    worst = 0.0
    for name, module in peft_model.named_modules():
        if not (hasattr(module, "lora_A") and "default" in module.lora_A):
            continue
        base = module.get_base_layer()
        W = originals[key(name)]
        assert type(base.weight).__name__ == "Params4bit"
        assert (base.weight.quant_type, base.weight.blocksize) == ("nf4", 64)
        with torch.no_grad():
            delta = module.scaling["default"] * module.lora_B["default"].weight @ module.lora_A["default"].weight
        # "re-quantised correctly": the stored weight is exactly what bitsandbytes makes of W − γ·B₀A₀
        q, state = bnb.functional.quantize_4bit(
            W - delta, blocksize=64, compress_statistics=base.weight.compress_statistics, quant_type="nf4"
        )
        torch.testing.assert_close(dequantized(base), bnb.functional.dequantize_4bit(q, state), atol=0, rtol=0)
        worst = max(worst, float((dequantized(base) + delta - W).abs().max()))
    assert worst == pytest.approx(info.max_requantization_error)
    # the model moved by the quantisation error only
    assert (logits(peft_model, ids) - expected).abs().max() < 0.2


def test_8bit(model_dir, ids):
    model = load(model_dir, "8bit")
    expected = logits(model, ids)
    peft_model = get_peft_model_with_init(model, cfg(), "rlpo", show_progress=False)
    torch.testing.assert_close(logits(peft_model, ids), expected, atol=0, rtol=0)
    model = load(model_dir, "8bit")
    with pytest.warns(UserWarning, match="re-quantised"):
        milora = get_peft_model_with_init(model, cfg(), "milora", requantize=True, show_progress=False)
    assert all(type(m.weight).__name__ == "Int8Params" for m in quantized_layers(milora).values())
    assert (logits(milora, ids) - expected).abs().max() < 0.05


def test_cpu_inference_packed_weight_is_refused(model_dir, ids):
    model = load(model_dir, "4bit").eval()
    logits(model, ids)  # eval + no grad on a CPU with AVX512-BF16: bitsandbytes repacks the weights
    packed = any(
        getattr(m.weight.quant_state, "packing_format_for_cpu", False) for m in quantized_layers(model).values()
    )
    if not packed:
        pytest.skip("this CPU has no AVX512-BF16: bitsandbytes does not repack")
    with pytest.raises(RuntimeError, match="repacked by bitsandbytes for CPU inference"):
        get_peft_model_with_init(model, cfg(), "rlpo", show_progress=False)


def test_peft_randomized_pissa_refused_on_quantized_base(model_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load(model_dir, "4bit_bf16_storage")
    with pytest.raises(ValueError, match="Use method='pissa' with solver='randomized'"):
        get_peft_model_with_init(model, cfg(), "pissa_niter_4")
