"""Configuration for `RLVRGRPOTrainer`: TRL's `GRPOConfig` plus the fields of this package's methods.

Every new field defaults to stock TRL behaviour. Fields are grouped by feature (one section each) so that the
validation of one feature lives next to its fields.
"""

from dataclasses import dataclass, field

from trl import GRPOConfig


# Loss types whose surrogate is PPO's hard clip min(r·A, clip(r)·A): the only ones with a clip to recover from.
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
CLIP_RECOVERY_MODES = ("none", "nsr", "nsr_expected")


@dataclass
class RLVRGRPOConfig(GRPOConfig):
    r"""
    Configuration class for [`RLVRGRPOTrainer`]: every field of TRL's `GRPOConfig`, plus the fields below. With the
    new fields at their defaults the trainer is stock TRL `GRPOTrainer`, to the bit.

    Parameters:
        > Stochastic clip recovery (NSR, https://huggingface.co/papers/2605.22703)

        clip_recovery (`str`, *optional*, defaults to `"none"`):
            What happens to tokens that PPO's clip cuts off. `"none"`: stock TRL (no gradient). `"nsr"`: Near-boundary
            Stochastic Rescue: each clipped token draws u ~ U(0, 1); on the upper side (A > 0, r > 1 + ε_high) it is
            rescued iff u·r ≤ 1 + ε_high, on the lower side (A < 0, r < 1 − ε_low) iff u ≤ r / (1 − ε_low); a rescued
            token's surrogate is u·r·A. `"nsr_expected"`: the deterministic ablation that gives every clipped token
            the expected NSR gradient weight ((1+ε_high)²/(2r²) upper, r²/(2(1−ε_low)²) lower). Only for loss types
            with a hard clip (grpo, bnpo, dr_grpo, dapo, luspo). The paper uses DAPO's clip (0.2, 0.28).
        clip_recovery_seed (`int`, *optional*):
            Seed of the dedicated generator for NSR's draws (the global RNG, which drives generation sampling, is not
            consumed). Defaults to `seed`. Each process offsets it by its rank, so ranks draw independent noise.
    """

    # ---------------------------------------------------------------- Stochastic clip recovery (NSR)
    clip_recovery: str = field(
        default="none",
        metadata={
            "help": "Clip recovery for PPO's clipped surrogate: 'none' (stock TRL), 'nsr' (Near-boundary Stochastic "
            "Rescue, https://huggingface.co/papers/2605.22703) or 'nsr_expected' (deterministic ablation with the "
            "expected NSR weights). Needs a loss type with a hard clip: grpo, bnpo, dr_grpo, dapo or luspo.",
            "choices": list(CLIP_RECOVERY_MODES),
        },
    )
    clip_recovery_seed: int | None = field(
        default=None,
        metadata={"help": "Seed for NSR's random draws (dedicated generator, offset by rank). Defaults to `seed`."},
    )

    def __post_init__(self):
        super().__post_init__()
        self._check_clip_recovery()

    def _check_clip_recovery(self):
        if self.clip_recovery not in CLIP_RECOVERY_MODES:
            raise ValueError(
                f"clip_recovery={self.clip_recovery!r} is not supported. Use one of {list(CLIP_RECOVERY_MODES)}."
            )
        if self.clip_recovery != "none" and self.loss_type not in CLIPPED_LOSS_TYPES:
            raise ValueError(
                f"clip_recovery={self.clip_recovery!r} needs a loss with PPO's hard clip, but loss_type="
                f"{self.loss_type!r} has none to recover from. Set loss_type to one of {list(CLIPPED_LOSS_TYPES)} "
                "(the paper uses 'dapo' with epsilon=0.2, epsilon_high=0.28), or set clip_recovery='none'."
            )
        if self.clip_recovery != "none" and self.clip_recovery_seed is None:
            self.clip_recovery_seed = self.seed
