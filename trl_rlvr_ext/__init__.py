"""trl_rlvr_ext: drop-in TRL trainers for RL-for-reasoning (RLVR) methods.

The public API is re-exported here lazily, so that ``import trl_rlvr_ext`` stays cheap (no torch / TRL import until
a trainer is touched) and a CLI subcommand only pays for what it uses.
"""

import importlib
from typing import TYPE_CHECKING


__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "RLVRGRPOConfig": "trl_rlvr_ext.grpo.grpo_config",
    "RLVRGRPOTrainer": "trl_rlvr_ext.grpo.grpo_trainer",
    "GRPOMethod": "trl_rlvr_ext.grpo.method",
    "register_method": "trl_rlvr_ext.grpo.method",
    "CheckpointState": "trl_rlvr_ext.grpo.checkpoint_state",
    "ISDPOConfig": "trl_rlvr_ext.dpo.dpo_config",
    "ISDPOTrainer": "trl_rlvr_ext.dpo.dpo_trainer",
    "pass_at_k": "trl_rlvr_ext.evaluation",
    "PassAtKCallback": "trl_rlvr_ext.evaluation",
    "get_peft_model_with_init": "trl_rlvr_ext.lora_init",
    "get_pretrained_model_path": "trl_rlvr_ext.pretrained",
}

__all__ = ["__version__", *_LAZY]

# Importing the package changes nothing in another library (no logging filter, no patch): a drop-in library logs what
# stock TRL would. The command lines (`trl_rlvr_ext.scripts`), an application of their own, hold bitsandbytes' 4-bit
# kernel notice (see `_compat`).


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trl_rlvr_ext' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover
    from .dpo.dpo_config import ISDPOConfig
    from .dpo.dpo_trainer import ISDPOTrainer
    from .grpo.checkpoint_state import CheckpointState
    from .grpo.grpo_config import RLVRGRPOConfig
    from .grpo.grpo_trainer import RLVRGRPOTrainer
    from .grpo.method import GRPOMethod, register_method
    from .pretrained import get_pretrained_model_path
