"""Configuration for `ISDPOTrainer`: TRL's `DPOConfig` plus importance-sampled direct alignment (IS-DAA).

Fields are grouped by feature (one section each), so that the validation of a feature sits next to its fields.
"""

import math
import warnings
from dataclasses import dataclass, field

from trl import DPOConfig

from .._compat import check_training_values
from ..lora_init.config import LoraInitArguments


# TRL losses that sort the batch (optimal transport over the batch): a per-pair weight no longer lines up with a pair
# once sorted. TRL refuses its own per-pair (WPO) weights with them for the same reason.
IS_INCOMPATIBLE_LOSS_TYPES = ("aot", "aot_unpaired")
IMPORTANCE_WEIGHT_CAP_DEFAULT = math.exp(0.5)  # the authors' default: min(log w, 2·eps), eps = 0.25
# Not the authors' (they have no lower bound): bf16's relative precision, 8 significand bits. Next to a pair at weight
# 1, a pair weighted below 2^-8 is lost in a bf16 sum anyway; the floor keeps every pair at 1/256 of DPO's step at
# least once the whole batch has left π_D (docs/methods/is_dpo.md, "The floor").
IMPORTANCE_WEIGHT_FLOOR_DEFAULT = 2.0**-8
# `behavior_logps_columns` value that makes the reference policy the behaviour policy, whatever columns the data has.
BEHAVIOR_COLUMNS_REFERENCE = "none"


@dataclass
class ISDPOConfig(LoraInitArguments, DPOConfig):
    r"""
    Configuration class for [`ISDPOTrainer`]: every field of TRL's `DPOConfig`, plus the fields below. With
    `importance_sampling=False` the trainer is stock TRL `DPOTrainer`, to the bit. The new fields implement
    importance-sampled direct alignment (IS-DAA, https://huggingface.co/papers/2506.08681).

    Parameters:
        importance_sampling (`bool`, *optional*, defaults to `True`):
            Multiply the per-pair loss of every `loss_type` by the clipped, detached importance weight
            w = exp(min(log π_θ(y_w) − log π_D(y_w) + log π_θ(y_l) − log π_D(y_l), log C)), on sequence log-prob
            sums. The behaviour policy π_D is read from the dataset columns `behavior_chosen_logps` /
            `behavior_rejected_logps` when present (both or neither), and is the reference policy otherwise (the
            paper's setting: pairs sampled from the SFT model). No extra forward pass. `False` gives stock DPO.
        behavior_logps_columns (`list[str]`, *optional*):
            Where π_D comes from. Unset: the columns `behavior_chosen_logps` / `behavior_rejected_logps` when present,
            else the reference policy; a dataset that carries the IS-DAA authors' behaviour columns `chosen_logps` /
            `rejected_logps` is then an error, since they would be silently ignored. Two column names (chosen,
            rejected), e.g. `["chosen_logps", "rejected_logps"]` for data prepared for the authors' code: read π_D
            from these columns (they must exist). `"none"`: π_D = π_ref, any behaviour columns are ignored.
        importance_weight_cap (`float`, *optional*, defaults to `e^0.5 ≈ 1.6487`):
            Upper clip C of the weight, in ratio units (there is no lower clip). The authors' code clips log w at
            2·eps with eps = 0.25 by default (C = e^0.5); their released script uses eps = 1.0 (C = e^2 ≈ 7.389).
            Must be ≥ 1 (w = 1 at the start of training); `inf` disables the clip.
        importance_weight_floor (`float`, *optional*, defaults to `2^-8 ≈ 0.0039`):
            Lower bound F of the clipped weight: w = max(exp(min(log w, log C)), F). Not in the paper, whose weight
            has no lower bound: with π_D = π_ref a large policy move sends every weight to 0 (exactly 0 once
            exp underflows), and with it the loss and learning. F = 2^-8 is bf16's relative precision: a pair weighted
            below it next to a pair at weight 1 is lost in a bf16 sum anyway, so the floor binds in earnest only when
            the whole batch has collapsed, and then keeps every pair at 1/256 of DPO's step. `0` gives the authors'
            weight exactly. In [0, 1]. `is/floored_frac` logs the share of pairs at the floor.
        importance_weighted_eval_loss (`bool`, *optional*, defaults to `False`):
            `False`: `eval_loss` is TRL's DPO loss, unweighted, comparable across runs and with stock DPO (the
            weights depend on how far the policy has moved, so a weighted eval loss falls as the policy drifts,
            whatever the fit); the weighted one is logged as `eval_is/weighted_loss`. `True`: `eval_loss` is the
            weighted loss, as in training. The authors' script computes no eval loss.
        is_weight_max (`float`, *optional*):
            Deprecated name of `importance_weight_cap` (it read like a boolean); still accepted, with a
            `FutureWarning`, and removed in the next release.
        lora_init (`str`, *optional*):
            Initialise the LoRA adapter of `peft_config` (required) with `"rlpo"`/`"rlmo"` (orthonormal top/bottom-r
            right singular vectors, B₀ = 0; https://huggingface.co/papers/2606.31813, paper: r = 16, α = 32),
            `"pissa"`/`"milora"` (base rewritten to W − γ·B₀A₀) or a PEFT `init_lora_weights` value. The trainer
            builds the PeftModel itself, so the reference log-probs are the original model's for every init.
        lora_init_kwargs (`dict`, *optional*):
            Options of the init (`solver`, `oversampling`, `niter`, `seed`, `requantize`, `show_progress`,
            `initial_adapter_dir`, `save_initial_adapter`, `export_converted_adapter`); see `trl_rlvr_ext.lora_init`.

    Notes:
        - `loss_type` may be any per-pair TRL loss or mixture (`loss_weights`); `aot` and `aot_unpaired` sort the
          batch, so a per-pair weight is undefined for them and they are rejected.
        - With `loss_type="ipo"` TRL length-normalises the log-ratios inside the loss; the weight still uses
          sequence sums, as in the paper, and β values do not transfer from the paper's (summed) IPO.
        - `ld_alpha` (LD-DPO) changes TRL's sequence log-probs away from plain sums, so it is rejected with IS on.
    """

    # ---- Importance-sampled direct alignment (IS-DAA)
    importance_sampling: bool = field(
        default=True,
        metadata={
            "help": "IS-DAA (https://huggingface.co/papers/2506.08681): multiply each pair's loss, for every "
            "`loss_type`, by the clipped, detached importance weight w = exp(min(log w, log C)), log w = "
            "(log π_θ(y_w) − log π_D(y_w)) + (log π_θ(y_l) − log π_D(y_l)) on sequence sums. π_D comes from the "
            "dataset columns `behavior_chosen_logps`/`behavior_rejected_logps` when present, else it is the "
            "reference policy. False gives stock DPO."
        },
    )
    behavior_logps_columns: list[str] | None = field(
        default=None,
        metadata={
            "help": "Where the behaviour policy π_D comes from. Unset: the columns behavior_chosen_logps / "
            "behavior_rejected_logps when present, else the reference policy (data carrying the IS-DAA authors' "
            "columns chosen_logps / rejected_logps is then an error, not silently ignored). Two column names "
            "(chosen, rejected), e.g. `chosen_logps rejected_logps` for data prepared for the authors' code: read "
            "π_D from them. `none`: π_D is the reference policy and any behaviour columns are ignored.",
        },
    )
    importance_weight_cap: float = field(
        default=IMPORTANCE_WEIGHT_CAP_DEFAULT,
        metadata={
            "help": "Upper clip C of the IS-DAA weight, in ratio units (no lower clip). Default e^0.5 ≈ 1.6487, the "
            "authors' code default (clip log w at 2·eps, eps = 0.25); their released script used e^2 ≈ 7.389 "
            "(eps = 1.0). Must be ≥ 1; `inf` disables the clip."
        },
    )
    importance_weight_floor: float = field(
        default=IMPORTANCE_WEIGHT_FLOOR_DEFAULT,
        metadata={
            "help": "Lower bound F of the clipped IS-DAA weight: w = max(exp(min(log w, log C)), F). Not in the paper "
            "(https://huggingface.co/papers/2506.08681), which has no lower bound: with the reference as behaviour "
            "policy, a large policy move sends every weight, the loss and learning to 0. Default 2^-8 ≈ 0.0039, bf16's "
            "relative precision (a pair weighted below it beside a pair at weight 1 is lost in a bf16 sum anyway): it "
            "binds in earnest only once the whole batch has collapsed. 0 gives the authors' weight exactly. In [0, 1]."
        },
    )
    importance_weighted_eval_loss: bool = field(
        default=False,
        metadata={
            "help": "False (default): eval_loss is TRL's unweighted DPO loss, comparable with stock DPO; the "
            "importance-weighted one is logged as eval_is/weighted_loss. True: eval_loss is the weighted loss, as in "
            "training. The paper (https://huggingface.co/papers/2506.08681) reports no eval loss."
        },
    )
    is_weight_max: float | None = field(
        default=None,
        metadata={"help": "Deprecated: use `importance_weight_cap` (same meaning). Removed in the next release."},
    )

    def __post_init__(self):
        check_training_values(self)  # before TRL's own checks, which would fail on them less clearly
        super().__post_init__()
        self._check_package_options()

    def _check_package_options(self):
        # This package's checks alone (also run on a plain DPOConfig converted by the trainer)
        self._check_importance_sampling()
        self._check_lora_init()

    def _resolve_deprecated_weight_cap(self):
        if self.is_weight_max is None:
            return
        old, new = float(self.is_weight_max), float(self.importance_weight_cap)
        if new != IMPORTANCE_WEIGHT_CAP_DEFAULT and new != old:
            raise ValueError(
                f"is_weight_max={old} and importance_weight_cap={new} disagree: is_weight_max is the deprecated name "
                "of importance_weight_cap. Set importance_weight_cap only."
            )
        warnings.warn(
            "ISDPOConfig.is_weight_max is deprecated and will be removed in the next release: use "
            "importance_weight_cap (same meaning).",
            FutureWarning,
            stacklevel=4,
        )
        self.importance_weight_cap = old
        self.is_weight_max = None  # one source of truth from here on

    def _check_importance_sampling(self):
        if not isinstance(self.importance_sampling, bool):
            raise TypeError(f"importance_sampling must be True or False, got {self.importance_sampling!r}.")
        self._resolve_deprecated_weight_cap()
        self.importance_weight_cap = float(self.importance_weight_cap)
        if math.isnan(self.importance_weight_cap) or self.importance_weight_cap < 1.0:
            raise ValueError(
                f"importance_weight_cap={self.importance_weight_cap} is the upper clip C of the importance weight and "
                "must be ≥ 1 "
                "(every weight is 1 at the start of training, so C < 1 only rescales the loss). The paper's values "
                "are e^0.5 ≈ 1.6487 (default) and e^2 ≈ 7.389; use inf for no clip."
            )
        self._check_importance_weight_floor()
        self._check_behavior_logps_columns()
        if not self.importance_sampling:
            return
        sorted_losses = [loss_type for loss_type in self.loss_type if loss_type in IS_INCOMPATIBLE_LOSS_TYPES]
        if sorted_losses:
            raise ValueError(
                f"importance_sampling=True cannot weight loss_type {sorted_losses}: these losses sort the batch, so "
                "a per-pair weight no longer matches its pair. Use a per-pair loss (e.g. 'sigmoid', 'ipo', 'hinge', "
                "'robust') or set importance_sampling=False."
            )
        if self.ld_alpha is not None:
            raise ValueError(
                f"importance_sampling=True needs plain sequence log-prob sums, but ld_alpha={self.ld_alpha} makes "
                "TRL's policy and reference log-probs length-desensitised (LD-DPO). Set ld_alpha=None, or "
                "importance_sampling=False."
            )

    def _check_importance_weight_floor(self):
        if not isinstance(self.importance_weighted_eval_loss, bool):
            raise TypeError(
                f"importance_weighted_eval_loss must be True or False, got {self.importance_weighted_eval_loss!r}."
            )
        self.importance_weight_floor = float(self.importance_weight_floor)
        if not 0.0 <= self.importance_weight_floor <= 1.0:  # also rejects NaN
            raise ValueError(
                f"importance_weight_floor={self.importance_weight_floor} is the lower bound F of the importance weight "
                "and must be in [0, 1] (every weight is 1 at the start of training, so F > 1 only rescales the loss). "
                f"Default {IMPORTANCE_WEIGHT_FLOOR_DEFAULT} (2^-8); 0 gives the authors' weight, with no lower bound."
            )

    def _check_behavior_logps_columns(self):
        columns = self.behavior_logps_columns
        if columns is None:
            return
        if isinstance(columns, str):  # a YAML scalar or a keyword argument given as one string
            columns = [columns]
        columns = list(columns)
        if columns == [BEHAVIOR_COLUMNS_REFERENCE]:
            self.behavior_logps_columns = columns
            return
        if len(columns) != 2 or not all(isinstance(c, str) and c for c in columns) or columns[0] == columns[1]:
            raise ValueError(
                f"behavior_logps_columns={self.behavior_logps_columns!r} must name two different dataset columns, "
                "the chosen and the rejected behaviour log-probs (e.g. ['chosen_logps', 'rejected_logps'] for data "
                f"prepared for the IS-DAA authors' code), or be {BEHAVIOR_COLUMNS_REFERENCE!r} to use the reference "
                "policy as the behaviour policy."
            )
        self.behavior_logps_columns = columns

    @property
    def behavior_policy_is_reference(self) -> bool:
        """True when `behavior_logps_columns="none"`: π_D = π_ref, whatever columns the data carries."""
        return self.behavior_logps_columns == [BEHAVIOR_COLUMNS_REFERENCE]
