"""RELEX recording (`relex_record_steps` > 0, https://arxiv.org/abs/2605.21468): θ_s − θ_0 is recorded every
`relex_record_steps` optimizer steps by `RELEXTrajectoryCallback`; training itself is unchanged.
"""

import os
from dataclasses import dataclass, field
from typing import ClassVar

from ...extrapolation.trajectory import RECORD_DTYPES as RELEX_RECORD_DTYPES
from ...lora_init.options import rewrites_base
from ..method import GRPOMethod


@dataclass
class RelexArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
        relex_record_steps (`int`, *optional*, defaults to `0`):
            Record the run's checkpoint trajectory for RELEX ("REinforcement Learning EXtrapolation",
            https://arxiv.org/abs/2605.21468, code https://github.com/weizhepei/RELEX) every this many optimizer steps:
            θ_0 at the start, then θ_s − θ_0 (`trl_rlvr_ext.extrapolation.RELEXTrajectoryCallback`; under PEFT, the
            adapter's tensors). `trl-rlvr-ext relex` then fits the rank-r subspace of each tensor's trajectory and
            writes extrapolated checkpoints. 0: off (stock TRL). The authors record every step (1). Training is
            unchanged; logged as `relex/recorded_steps`, `relex/record_seconds` and `relex/write_seconds`.
        relex_trajectory_dir (`str`, *optional*):
            The trajectory folder. Defaults to `<output_dir>/relex_trajectory`.
        relex_record_dtype (`str`, *optional*, defaults to `"float16"`):
            dtype of the stored deltas: `"float16"` (the authors'), `"bfloat16"` or `"float32"`.
    """

    relex_record_steps: int = field(
        default=0,
        metadata={
            "help": "Record θ_s − θ_0 every this many optimizer steps for RELEX (https://arxiv.org/abs/2605.21468; "
            "`trl-rlvr-ext relex` extrapolates the trajectory). 0: off (stock TRL). The authors record every step (1)."
        },
    )
    relex_trajectory_dir: str | None = field(
        default=None, metadata={"help": "The RELEX trajectory folder. Defaults to <output_dir>/relex_trajectory."}
    )
    relex_record_dtype: str = field(
        default="float16",
        metadata={
            "help": "dtype of the recorded deltas: float16 (the authors'), bfloat16 or float32.",
            "choices": list(RELEX_RECORD_DTYPES),
        },
    )


class Relex(GRPOMethod):
    name = "relex"
    Args = RelexArguments
    switches: ClassVar[dict] = {"relex_record_steps": 0}
    paper = "[RELEX](https://arxiv.org/abs/2605.21468)"

    def setup(self, trainer) -> None:
        from ...extrapolation.callback import RELEXTrajectoryCallback

        super().setup(trainer)
        args = self.args
        trainer.add_callback(
            RELEXTrajectoryCallback(
                args.relex_trajectory_dir, args.relex_record_steps, args.relex_record_dtype, trainer=trainer
            )
        )

    @classmethod
    def check(cls, args) -> None:
        steps = args.relex_record_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(
                f"relex_record_steps must be an integer >= 0 (0: off; the authors record every step, 1), got {steps!r}."
            )
        if args.relex_record_dtype not in RELEX_RECORD_DTYPES:
            raise ValueError(
                f"relex_record_dtype={args.relex_record_dtype!r} is not supported. Use one of "
                f"{list(RELEX_RECORD_DTYPES)} (the authors store float16 deltas)."
            )
        if steps == 0:
            return
        if args.lora_init is not None and rewrites_base(args.lora_init):
            raise ValueError(
                f"relex_record_steps records the adapter, but lora_init={args.lora_init!r} rewrites the base weights "
                "(a residual W − γ·B₀A₀): the extrapolated adapters would apply to that residual, not to the saved "
                "base model. Use lora_init 'rlpo' or 'rlmo' (base untouched), PEFT's default init, or full fine-tuning."
            )
        if args.relex_trajectory_dir is None:
            args.relex_trajectory_dir = os.path.join(args.output_dir, "relex_trajectory")
