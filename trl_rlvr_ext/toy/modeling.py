"""An offline tiny causal LM and byte-level tokenizer (no hub access, ever).

The tokenizer has one token per byte (256) plus three special tokens, and TRL's packaged Qwen2.5 chat template, so
every string encodes and both TRL dataset formats (standard and conversational) work. The model is a small
``Qwen2ForCausalLM`` whose size is a dial (``hidden_size``, ``num_hidden_layers``, ...).
"""

import importlib.resources

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM


SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (259 tokens) with the Qwen2.5 chat template shipped inside the TRL wheel."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for symbol in sorted(pre_tokenizers.ByteLevel.alphabet()):  # the 256 byte symbols: any text encodes
        vocab[symbol] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
    )
    tokenizer.chat_template = importlib.resources.files("trl").joinpath("chat_templates/qwen2_5.jinja").read_text()
    return tokenizer


def make_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 16,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 32,
    max_position_embeddings: int = 512,
    seed: int = 0,
    tie_word_embeddings: bool = False,
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 causal LM sized by the arguments (defaults: ~13k parameters, for tests)."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


# A shape vLLM's CPU attention accepts (head size 32; it takes 32, 64, 80, 96, 112, 128, ...: the default shape's 4 is
# refused), with a tied LM head, so that vLLM's CPU weight sync must re-pack it (docs/vllm_cpu.md). About 110 k
# parameters. ``toy:vllm`` names a random model of this shape.
VLLM_SHAPE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 128,
    "tie_word_embeddings": True,
}


def save_tiny_model(path, seed: int = 0, **model_kwargs) -> str:
    """Build and save a tiny model with its tokenizer to ``path``; returns the path as a string.

    TRL needs a *path* (not an in-memory model) wherever it rebuilds a reference model itself (GRPO full fine-tuning
    with ``beta != 0``; DPO without ``ref_model``), and ``AutoProcessor.from_pretrained(path)`` loads offline.
    """
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=seed, **model_kwargs)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def make_model_from_settings(tokenizer: PreTrainedTokenizerFast, settings) -> Qwen2ForCausalLM:
    """`make_model` sized by the model fields of a warm-start settings object (the toy's or a reasoning-gym base's)."""
    return make_model(
        tokenizer,
        hidden_size=settings.hidden_size,
        num_hidden_layers=settings.num_hidden_layers,
        num_attention_heads=settings.num_attention_heads,
        num_key_value_heads=settings.num_key_value_heads,
        intermediate_size=settings.intermediate_size,
        seed=settings.seed,
    )
