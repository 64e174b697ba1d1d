"""The embedded default: an offline tiny model, its tokenizer, and a synthetic verifiable task."""

from .modeling import SPECIAL_TOKENS, make_model, make_tokenizer, save_tiny_model


__all__ = ["SPECIAL_TOKENS", "make_model", "make_tokenizer", "save_tiny_model"]
