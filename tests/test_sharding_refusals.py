"""The refusals of sharding set-ups that cannot work, checked in one process (their 2-process versions, and the
DeepSpeed ones, run in tests/test_sharding.py)."""

from types import SimpleNamespace

import pytest
from accelerate.utils import DistributedType
from peft import LoraConfig

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext._compat import check_fsdp_really_runs, fsdp_requested


def _args(kind, num_processes=2, fsdp=""):
    return SimpleNamespace(
        fsdp=fsdp, distributed_state=SimpleNamespace(distributed_type=kind, num_processes=num_processes)
    )


def test_fsdp_asked_but_ddp_run_is_refused(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ValueError, match="silently drops the FSDP plugin and runs plain DDP"):
        check_fsdp_really_runs(_args(DistributedType.MULTI_CPU), "RLVRGRPOTrainer")
    check_fsdp_really_runs(_args(DistributedType.MULTI_GPU), "RLVRGRPOTrainer")  # accelerate shards these
    check_fsdp_really_runs(_args(DistributedType.FSDP), "RLVRGRPOTrainer")
    check_fsdp_really_runs(_args(DistributedType.NO, num_processes=1), "RLVRGRPOTrainer")  # nothing to shard


def test_fsdp_asked_through_the_config_counts(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert not fsdp_requested(_args(DistributedType.MULTI_CPU))
    assert fsdp_requested(_args(DistributedType.MULTI_CPU, fsdp="full_shard"))
    with pytest.raises(ValueError, match="FSDP is requested"):
        check_fsdp_really_runs(_args(DistributedType.MULTI_CPU, fsdp="full_shard"), "ISDPOTrainer")


@pytest.mark.parametrize("method", ["pissa", "milora"])
def test_residual_lora_init_export_under_fsdp_is_refused_before_loading(monkeypatch, tmp_path, method):
    from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # one process: FSDP asked, nothing else to refuse
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, bf16=False), lora_init=method)
    with pytest.raises(ValueError, match="export_converted_adapter"):
        RLVRGRPOTrainer(
            model=str(tmp_path / "never-loaded"),  # the refusal comes before any model is loaded
            reward_funcs=digit_reward,
            args=args,
            train_dataset=prompt_dataset(),
            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"),
        )
