import os


# Offline by construction: set before transformers / huggingface_hub are imported anywhere.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import pytest


def pytest_report_header(config):
    """The CPU and whether it has native bf16 at the top of every test log: bf16 autocast sums differently (and about
    ten times slower) on a CPU without it, and torch picks its kernels by instruction set (AVX2, AVX-512, AMX)."""
    import torch

    from trl_rlvr_ext.provenance import BF16_FLAGS, cpu_info

    cpu = cpu_info()
    native = {True: "yes", False: "no", None: "unknown"}[cpu["bf16"]]
    kernels = torch.backends.cpu.get_cpu_capability()
    return [f"cpu: {cpu['model']}; native bf16 ({' or '.join(BF16_FLAGS)}): {native}; torch kernels: {kernels}"]


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A saved tiny Qwen2 model + byte tokenizer (a path, so TRL can rebuild reference models offline)."""
    from trl_rlvr_ext.toy import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny_model"))
