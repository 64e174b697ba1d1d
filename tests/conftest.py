import os


# Offline by construction: set before transformers / huggingface_hub are imported anywhere.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import pytest


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A saved tiny Qwen2 model + byte tokenizer (a path, so TRL can rebuild reference models offline)."""
    from trl_rlvr_ext.toy import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny_model"))
