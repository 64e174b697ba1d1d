"""The reward guard (always on): bounded verifier time, and errors that name the reward, row and completion
(`trl_rlvr_ext.rewards.guard`). It acts before TRL's construction, where the trainer wraps the reward functions
(the `reward_funcs` hook); a well-behaved reward's output passes through untouched, under its own name.
"""

from dataclasses import dataclass, field

from ...rewards.guard import REWARD_ON_ERROR_MODES, REWARD_ON_NAN_MODES, guard_reward_funcs
from ..method import GRPOMethod


@dataclass
class RewardGuardArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
        reward_timeout (`float` or `None`, *optional*, defaults to `10.0`):
            Seconds a verifier may spend on one completion before the completion is scored 0.0 (counted in the
            `rewards/timeouts` metric). Passed to every reward function that accepts a `reward_timeout` keyword, such
            as `trl_rlvr_ext.rewards.math.math_accuracy_reward`, which then verifies in worker processes that are
            killed on time, on any thread. `None`: verify in-process, unbounded off the main thread.
        reward_on_error (`str`, *optional*, defaults to `"raise"`):
            What a reward function's failure on one completion does. `"raise"`: fail the step with an error naming
            the reward function, the row and the completion. `"zero"`: score the rows that raise (or return
            infinity or a non-number) 0.0, go on, and count them in the `rewards/errors` metric. See
            `trl_rlvr_ext.rewards.guard`.
        reward_on_nan (`str`, *optional*, defaults to `"ignore"`):
            What a NaN reward means. `"ignore"`: TRL's meaning, to the bit: that reward function gives the row no
            reward (TRL sums over reward functions with `nansum`); the first NaN of each function is logged as a
            warning. `"error"`: a NaN is a bad value like infinity, handled by `reward_on_error`.
    """

    reward_timeout: float | None = field(
        default=10.0,
        metadata={
            "help": "Seconds a verifier may spend on one completion before it is scored 0.0 (logged as "
            "rewards/timeouts); passed to reward functions with a `reward_timeout` keyword (math_accuracy). None: "
            "verify in-process, unbounded off the main thread."
        },
    )
    reward_on_error: str = field(
        default="raise",
        metadata={
            "help": "A reward function that raises (or returns infinity / a non-number) on a completion: 'raise' "
            "fails the step naming the function, row and completion; 'zero' scores the row 0.0 and counts it "
            "(rewards/errors).",
            "choices": list(REWARD_ON_ERROR_MODES),
        },
    )
    reward_on_nan: str = field(
        default="ignore",
        metadata={
            "help": "A NaN reward: 'ignore' keeps TRL's meaning (the function gives that row no reward; the first NaN "
            "is logged as a warning); 'error' treats it as a bad value, as reward_on_error says.",
            "choices": list(REWARD_ON_NAN_MODES),
        },
    )


class RewardGuard(GRPOMethod):
    name = "reward_guard"
    Args = RewardGuardArguments
    paper = "(this package)"

    @classmethod
    def active(cls, args) -> bool:
        return True  # the guard is transparent for a well-behaved reward: TRL's rewards to the bit

    @classmethod
    def reward_funcs(cls, reward_funcs, args):
        """The reward functions, guarded (called by the trainer before TRL's construction)."""
        return guard_reward_funcs(
            reward_funcs, on_error=args.reward_on_error, timeout=args.reward_timeout, on_nan=args.reward_on_nan
        )

    @classmethod
    def check(cls, args) -> None:
        if args.reward_on_error not in REWARD_ON_ERROR_MODES:
            raise ValueError(
                f"reward_on_error={args.reward_on_error!r} is not supported. Use one of {list(REWARD_ON_ERROR_MODES)}."
            )
        if args.reward_on_nan not in REWARD_ON_NAN_MODES:
            raise ValueError(
                f"reward_on_nan={args.reward_on_nan!r} is not supported. Use one of {list(REWARD_ON_NAN_MODES)}."
            )
        if args.reward_timeout is not None and not args.reward_timeout > 0:
            raise ValueError(
                f"reward_timeout must be a number of seconds > 0, or None to verify without a bound; got "
                f"{args.reward_timeout!r}."
            )
