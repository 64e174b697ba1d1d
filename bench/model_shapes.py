"""Randomly initialised Qwen2 models of named shapes, saved with the offline byte tokenizer (no hub access).

``qwen2-0.5b`` has the layer shapes of Qwen2-0.5B (hidden 896, 24 layers, 14 attention heads, 2 KV heads, intermediate
4864, vocabulary 151936, tied embeddings), so per-step costs scale as on the real model; the weights are random, which
does not change the cost of a step. ``dry`` is a tiny stand-in with the same structure (tied embeddings, a vocabulary
larger than the tokenizer) for CPU dry runs. The byte tokenizer has 259 tokens: ids beyond it are valid model outputs
that the tokenizer skips when decoding, so generation and rewards work unchanged.
"""

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from trl_rlvr_ext.toy import make_tokenizer


SHAPES = {
    "qwen2-0.5b": {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
    },
    "dry": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "vocab_size": 512,
        "tie_word_embeddings": True,
        "max_position_embeddings": 512,
    },
}

DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16}


def describe(shape: str) -> str:
    s = SHAPES[shape]
    return (
        f"hidden {s['hidden_size']}, {s['num_hidden_layers']} layers, {s['num_attention_heads']} heads / "
        f"{s['num_key_value_heads']} KV heads, intermediate {s['intermediate_size']}, vocab {s['vocab_size']}"
        + (", tied embeddings" if s["tie_word_embeddings"] else "")
    )


def save_shaped_model(path, shape: str, dtype: str = "float32", device: str = "cpu", seed: int = 0) -> str:
    """Build the ``shape`` model with random weights (on ``device``, fast on a GPU), save it in ``dtype`` with the byte
    tokenizer to ``path``; returns the path. Trainers load it with ``dtype="auto"``, i.e. in ``dtype``."""
    if shape not in SHAPES:
        raise ValueError(f"Unknown shape {shape!r}; choose one of {', '.join(SHAPES)}.")
    if dtype not in DTYPES:
        raise ValueError(f"Unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}.")
    tokenizer = make_tokenizer()
    config = Qwen2Config(
        **SHAPES[shape],
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model = model.to(DTYPES[dtype])
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    del model
    return str(path)
