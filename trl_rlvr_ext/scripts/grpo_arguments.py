"""`RLVRGRPOScriptArguments`: the script arguments of ``trl-rlvr-ext grpo`` (imports TRL; the script loads it lazily)."""

from dataclasses import dataclass, field

from trl import ScriptArguments

from ..rewards import REWARD_NAMES


@dataclass
class RLVRGRPOScriptArguments(ScriptArguments):
    """Script arguments of the GRPO script: TRL's `ScriptArguments` plus the reward functions."""

    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": f"Reward functions: names among {list(REWARD_NAMES)} or dotted import paths "
            "('my_lib.rewards.my_reward'). 'math_accuracy' grades math answers with math-verify. Required, except "
            "for the toy dataset (toy:arithmetic), whose reward toy_accuracy is then used (and said at start)."
        },
    )
    reward_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Optional reward model (hub id or local path), used in addition to `reward_funcs`."},
    )
