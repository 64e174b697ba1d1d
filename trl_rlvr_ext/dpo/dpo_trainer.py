"""`ISDPOTrainer`: TRL's `DPOTrainer` plus importance-sampled direct alignment (IS-DAA).

IS-DAA (https://huggingface.co/papers/2506.08681) multiplies the per-pair loss of every DPO `loss_type` by the clipped,
detached importance weight between the policy and the behaviour policy that generated the pair (see
`trl_rlvr_ext.losses.is_daa_weights`). The weight reuses the sequence log-probs TRL computes anyway: the policy's, and
the reference's (live or precomputed) or the dataset's `behavior_*_logps` columns. No extra forward pass.

With `importance_sampling=False` every override delegates to TRL unchanged, so the trainer is stock `DPOTrainer` to the
bit (tests/test_dpo_trainer.py proves it).

With importance sampling on, `_compute_loss` runs the installed TRL's `DPOTrainer._compute_loss`, copied verbatim
in `trl_rlvr_ext._trl` (one copy per TRL version whose source differs), with four blocks inserted between
``# --- IS-DAA begin`` / ``# --- IS-DAA end`` markers: TRL has no hook between the per-pair loss and its batch mean.
tests/test_trl_copies.py checks that removing the marked blocks gives back TRL's source exactly, so a TRL upgrade
that touches the method fails loudly instead of silently diverging.
"""

import logging
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from trl import DPOConfig, DPOTrainer

from .._compat import check_fsdp_really_runs, resolve_trainer_config
from .._trl import load_copy
from ..data import resolve_model_argument
from ..lora_init.saving import CheckpointAdapterMixin
from ..losses.is_daa import is_daa_clip, is_daa_log_weights, is_daa_weight_stats
from .behavior import (
    BEHAVIOR_CHOSEN_COLUMN,
    BEHAVIOR_COLUMNS,
    BEHAVIOR_REJECTED_COLUMN,
    _column_names,
    check_behavior_values,
    validate_behavior_columns,
)
from .dpo_config import BEHAVIOR_COLUMNS_REFERENCE, IMPORTANCE_WEIGHT_FLOOR_DEFAULT, ISDPOConfig


logger = logging.getLogger(__name__)

# The weights have collapsed when more than half of a batch's pairs weigh less than this before the floor: the policy
# puts under 1/256 of π_D's probability on most of the data, and (without the floor) those pairs no longer train.
IMPORTANCE_WEIGHT_COLLAPSE = IMPORTANCE_WEIGHT_FLOOR_DEFAULT

# The behaviour log-prob columns of data prepared for the IS-DAA authors' code (mail-research/AIS-Sampling4DAAs): their
# trainer reads π_D from these when present. Here they are read only when `behavior_logps_columns` names them.
AUTHORS_BEHAVIOR_COLUMNS = ("chosen_logps", "rejected_logps")


# The copies of TRL's methods that match the installed TRL (a clear ImportError on an unsupported version)
_TRL_COPY = load_copy("dpo")


class BehaviorLogpsCollator:
    """Wraps a preference collator: strips the behaviour log-prob fields from the examples, collates the rest with the
    wrapped collator, and adds them back as float32 tensors of shape ``(batch_size,)``. Other attributes are the
    wrapped collator's."""

    def __init__(self, collator: Callable):
        self.collator = collator

    def __getattr__(self, name):
        if name == "collator":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.collator, name)

    def __call__(self, examples: list[dict[str, Any]], *args, **kwargs) -> dict[str, Any]:
        if not examples or BEHAVIOR_CHOSEN_COLUMN not in examples[0]:
            return self.collator(examples, *args, **kwargs)
        values = {column: [example[column] for example in examples] for column in BEHAVIOR_COLUMNS}
        for column, column_values in values.items():  # map-style datasets are checked upfront; streams are not
            check_behavior_values(column_values, column, "current", where="batch row")
        stripped = [{k: v for k, v in example.items() if k not in BEHAVIOR_COLUMNS} for example in examples]
        batch = self.collator(stripped, *args, **kwargs)
        for column, column_values in values.items():
            batch[column] = torch.tensor(column_values, dtype=torch.float32)
        return batch


class ISDPOTrainer(CheckpointAdapterMixin, DPOTrainer):
    """[`~trl.DPOTrainer`] with importance-sampled direct alignment, configured by [`ISDPOConfig`].

    Each pair's loss (any per-pair `loss_type`, or a `loss_weights` mixture) is multiplied by the detached weight
    w = exp(min(log π_θ(y_w) − log π_D(y_w) + log π_θ(y_l) − log π_D(y_l), log C)), C = `importance_weight_cap`. π_D is read
    from the dataset columns `behavior_chosen_logps` / `behavior_rejected_logps` when present (add them with
    `trl_rlvr_ext.dpo.behavior.score_behavior_logps`), and is the reference policy otherwise. Works with an explicit
    `ref_model`, with `precompute_ref_log_probs`, and with PEFT (adapter-disabled or "ref"-adapter reference).

    The weight is floored at `importance_weight_floor` (2^-8 by default; 0 is the authors' weight), and a warning
    names the cause and the fix the first time the weights of a batch collapse (train and eval, once each). The eval
    loss is TRL's unweighted DPO loss unless `importance_weighted_eval_loss=True`.

    Logged beside TRL's `rewards/*` (over the pairs of all processes): `is/weight_mean`, `is/weight_max`,
    `is/clipped_frac` (pairs at the cap), `is/floored_frac` (pairs at the floor), `is/ess` (effective sample size
    fraction (Σw)²/(n·Σw²)) and, during evaluation, `is/weighted_loss` (the importance-weighted DPO loss, without a
    router aux loss).

    The constructor is `DPOTrainer`'s; `args` is an [`ISDPOConfig`] (a plain `trl.DPOConfig` is taken as an
    `ISDPOConfig` with the same fields and IS-DAA at its defaults).
    """

    _tag_names: ClassVar[list[str]] = ["trl", "dpo", "trl-rlvr-ext", "is-dpo"]

    def __init__(self, model, ref_model=None, args: ISDPOConfig | None = None, *pargs, **kwargs):
        # A plain trl.DPOConfig is converted (said in the log), with IS-DAA at its defaults; the default output folder
        # is TRL's own ("<model>-DPO").
        args = resolve_trainer_config(
            args,
            ISDPOConfig,
            DPOConfig,
            type(self).__name__,
            model,
            "DPO",
            "importance_sampling=True with the paper's cap, what this trainer adds; pass an ISDPOConfig with "
            "importance_sampling=False for stock DPO",
        )
        check_fsdp_really_runs(args, type(self).__name__)
        # This package's model names ("smollm2-135m-instruct", "toy:base") are local folders, never a hub look-up
        model, ref_model = resolve_model_argument(model), resolve_model_argument(ref_model)
        # Whether the datasets carry behaviour log-probs, by dataset name; set by `_prepare_dataset` during __init__
        self._behavior_columns: dict[str, bool] = {}
        # The weighted per-loss-type terms of the current eval batch (eval_loss itself is unweighted by default), and
        # the modes whose collapse warning has been given
        self._is_weighted_eval_terms: list[torch.Tensor] = []
        self._is_collapse_warned: set[str] = set()
        if args.lora_init is not None:  # build + initialise the PeftModel here, so TRL's reference is the original
            from ..lora_init.integration import apply_lora_init_to_trainer_arguments

            model, kwargs = apply_lora_init_to_trainer_arguments(model, args, kwargs)
        super().__init__(model, ref_model, args, *pargs, **kwargs)
        if not self.args.importance_sampling:
            return
        self.data_collator = BehaviorLogpsCollator(self.data_collator)
        if self.args.sync_ref_model and not self._behavior_columns.get("train", False):
            raise ValueError(
                "importance_sampling=True with sync_ref_model=True needs the behaviour log-probs in the dataset: "
                "without the columns behavior_chosen_logps / behavior_rejected_logps, the behaviour policy is the "
                "reference, which sync_ref_model keeps moving away from the policy that generated the pairs. Add the "
                "columns (score the data with the model that generated it: "
                "`trl_rlvr_ext.dpo.behavior.score_behavior_logps`), or set sync_ref_model=False."
            )

    # ---------------------------------------------------------------- data: keep and check the behaviour columns
    def _select_behavior_columns(self, dataset, args, dataset_name):
        """Apply `behavior_logps_columns`: the chosen columns end up under the standard names, or none remain."""
        names = set(_column_names(dataset))
        choice = args.behavior_logps_columns
        if choice is None:
            foreign = [column for column in AUTHORS_BEHAVIOR_COLUMNS if column in names]
            if foreign:
                used = "are used" if set(BEHAVIOR_COLUMNS) <= names else "are absent, so π_D would be the reference"
                raise ValueError(
                    f"The {dataset_name!r} dataset has the column(s) {foreign}, which data prepared for the IS-DAA "
                    "authors' code uses for the behaviour policy's log-probs; this trainer reads π_D from "
                    f"{list(BEHAVIOR_COLUMNS)} (which {used}), so they would be silently ignored. Say which: "
                    f"behavior_logps_columns={list(AUTHORS_BEHAVIOR_COLUMNS)} to read π_D from them, "
                    f"behavior_logps_columns={list(BEHAVIOR_COLUMNS)} to use the standard columns, or "
                    f"behavior_logps_columns={BEHAVIOR_COLUMNS_REFERENCE!r} for π_D = π_ref."
                )
            return dataset
        if args.behavior_policy_is_reference:
            present = [column for column in BEHAVIOR_COLUMNS if column in names]
            return dataset.remove_columns(present) if present else dataset
        chosen, rejected = choice
        missing = [column for column in choice if column not in names]
        if missing:
            raise ValueError(
                f"behavior_logps_columns={choice} names the column(s) {missing}, which the {dataset_name!r} dataset "
                f"does not have (its columns: {sorted(names)}). Name the two columns that hold the behaviour policy's "
                f"chosen and rejected sequence log-probs, or unset it."
            )
        if (chosen, rejected) == BEHAVIOR_COLUMNS:
            return dataset
        clash = [column for column in BEHAVIOR_COLUMNS if column in names]
        if clash:
            raise ValueError(
                f"behavior_logps_columns={choice}, but the {dataset_name!r} dataset also has {clash}: two sources "
                f"for π_D. Remove {clash}, or set behavior_logps_columns={list(BEHAVIOR_COLUMNS)}."
            )
        return dataset.rename_columns({chosen: BEHAVIOR_CHOSEN_COLUMN, rejected: BEHAVIOR_REJECTED_COLUMN})

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        if getattr(args, "importance_sampling", False):
            dataset = self._select_behavior_columns(dataset, args, dataset_name)
            dataset, present = validate_behavior_columns(dataset, f"{dataset_name!r}")
            reference = self._behavior_columns.get("train", present) if dataset_name != "train" else present
            if present != reference:
                raise ValueError(
                    f"The train dataset {'has' if reference else 'does not have'} the behaviour log-prob columns "
                    f"{list(BEHAVIOR_COLUMNS)}, but the {dataset_name!r} dataset {'does' if present else 'does not'}: "
                    "the IS-DAA weights of the two would use different behaviour policies. Add the columns to both "
                    "(e.g. with `trl_rlvr_ext.dpo.behavior.score_behavior_logps`) or to neither."
                )
            self._behavior_columns[dataset_name] = present
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

    def _set_signature_columns_if_needed(self):
        # Keep the behaviour columns through `remove_unused_columns` (TRL keeps its own ref_*_logps the same way)
        needs_columns = self._signature_columns is None and self.args.importance_sampling
        super()._set_signature_columns_if_needed()
        if needs_columns:
            self._signature_columns = [*self._signature_columns, *BEHAVIOR_COLUMNS]

    def compute_ref_log_probs(self, model, inputs):
        # The wrapped collator adds the behaviour tensors to every batch, also those of `_precompute_ref_logps`: they
        # are not model inputs.
        inputs = {key: value for key, value in inputs.items() if key not in BEHAVIOR_COLUMNS}
        return super().compute_ref_log_probs(model, inputs)

    # ---------------------------------------------------------------- IS-DAA metrics
    _IS_STATS = ("weight_mean", "weight_max", "clipped_frac", "floored_frac", "ess")

    def _log_importance_weights(self, mode: str, log_weights: torch.Tensor) -> None:
        """Push `is/*` diagnostics of this batch, over the pairs of all processes (as TRL's `rewards/*`), and warn once
        per mode when the weights have collapsed."""
        gathered = self.accelerator.gather(log_weights)
        stats = is_daa_weight_stats(gathered, self.args.importance_weight_cap, self.args.importance_weight_floor)
        stats["collapsed_frac"] = (
            (is_daa_clip(gathered, self.args.importance_weight_cap) < IMPORTANCE_WEIGHT_COLLAPSE).float().mean()
        )
        keys = [*self._IS_STATS, "collapsed_frac"]
        if mode == "eval":
            terms = self._is_weighted_eval_terms
            weighted = torch.stack(terms).sum() if terms else torch.zeros((), device=gathered.device)
            stats["weighted_loss"] = self.accelerator.gather(weighted.reshape(1)).mean()
            keys.append("weighted_loss")
        values = dict(zip(keys, torch.stack([stats[key].float() for key in keys]).tolist(), strict=True))
        collapsed_frac = values.pop("collapsed_frac")
        for key, value in values.items():
            self._metrics[mode][f"is/{key}"].append(value)
        if collapsed_frac > 0.5 and mode not in self._is_collapse_warned:
            self._is_collapse_warned.add(mode)
            self._warn_weights_collapsed(mode, collapsed_frac, values["weight_mean"])

    def _warn_weights_collapsed(self, mode: str, collapsed_frac: float, weight_mean: float) -> None:
        behaviour = (
            "the dataset's behaviour log-prob columns"
            if self._behavior_columns.get("train", False)
            else "the reference policy, since the data carries no behaviour log-prob columns"
        )
        floor = self.args.importance_weight_floor
        effect = (
            f"importance_weight_floor={floor:.4g} keeps each of them at {floor:.4g} times DPO's step"
            if floor > 0
            else "importance_weight_floor=0, so these pairs contribute (almost) nothing: the loss and learning stop"
        )
        logger.warning(
            "IS-DPO weights collapsed (%s, step %d): %.0f%% of the pairs weigh less than 2^-8 before the floor (mean "
            "weight %.3g); the policy has moved far from the behaviour policy pi_D, which is %s. %s. Fix: if the "
            "pairs were not sampled from the reference model, give the behaviour log-probs as the columns %s (`trl-"
            "rlvr-ext score-behavior --model_name_or_path <model that generated the pairs> ...`, or "
            "trl_rlvr_ext.dpo.behavior.score_behavior_logps); if they were, the policy has left the data: lower the "
            "learning rate, raise beta or stop earlier. Watch is/floored_frac and is/weight_mean.",
            mode,
            self.state.global_step,
            100 * collapsed_frac,
            weight_mean,
            behaviour,
            effect,
            " / ".join(BEHAVIOR_COLUMNS),
        )

    @staticmethod
    def _split_behavior_logps(inputs):
        """``(inputs without the behaviour fields, (chosen, rejected) or None)``; never mutates ``inputs``."""
        if BEHAVIOR_CHOSEN_COLUMN not in inputs and BEHAVIOR_REJECTED_COLUMN not in inputs:
            return inputs, None
        if BEHAVIOR_CHOSEN_COLUMN not in inputs or BEHAVIOR_REJECTED_COLUMN not in inputs:
            raise ValueError(
                f"The batch carries only one of {list(BEHAVIOR_COLUMNS)}; IS-DPO needs both or neither. A custom "
                "data_collator must pass both through."
            )
        behavior = (inputs[BEHAVIOR_CHOSEN_COLUMN], inputs[BEHAVIOR_REJECTED_COLUMN])
        return {key: value for key, value in inputs.items() if key not in BEHAVIOR_COLUMNS}, behavior

    def _is_daa_weights(self, chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, behavior_logps):
        """``(log w, w)`` per pair, for the marked block of the copy of TRL's `_compute_loss`.

        IS-DAA weight (https://huggingface.co/papers/2506.08681): log w = sg[(log π_θ(y_w) − log π_D(y_w)) +
        (log π_θ(y_l) − log π_D(y_l))] on sequence sums (ld_alpha is rejected by the config), w = max(exp(min(log w,
        log C)), F), F = `importance_weight_floor` (0: the authors' weight). π_D: the dataset's behaviour columns, else
        the reference, whose log-probs TRL has just computed or read from the precomputed columns (no extra forward
        pass)."""
        self._is_weighted_eval_terms = []  # a new batch
        if behavior_logps is None:
            behavior_chosen_logps, behavior_rejected_logps = ref_chosen_logps, ref_rejected_logps
        else:
            behavior_chosen_logps, behavior_rejected_logps = behavior_logps
        is_log_weights = is_daa_log_weights(
            chosen_logps, rejected_logps, behavior_chosen_logps, behavior_rejected_logps
        )
        weights = is_daa_clip(is_log_weights, self.args.importance_weight_cap, self.args.importance_weight_floor)
        return is_log_weights, weights

    def _is_daa_weight_loss(self, mode, per_sequence_loss, is_weights, loss_weight):
        """The per-pair loss of one `loss_type` that TRL averages: w · ℓ(pair), w detached (the IS-DAA loss).

        In evaluation, unless `importance_weighted_eval_loss`, ℓ(pair) unweighted, so that `eval_loss` is TRL's DPO
        loss; the weighted term is kept for `is/weighted_loss` either way."""
        weighted = per_sequence_loss * is_weights
        if mode == "train":
            return weighted
        self._is_weighted_eval_terms.append(weighted.detach().mean() * loss_weight)
        return weighted if self.args.importance_weighted_eval_loss else per_sequence_loss

    # ---------------------------------------------------------------- the loss: TRL's, with the IS-DAA blocks
    def _compute_loss(self, model, inputs, return_outputs):
        # Stock TRL whenever importance sampling is off: the copy only runs with it on.
        if not self.args.importance_sampling:
            return super()._compute_loss(model, inputs, return_outputs)
        # TRL's `_compute_loss` for the installed TRL, with four IS-DAA blocks (trl_rlvr_ext/_trl/): TRL has no hook
        # between the per-pair loss and its batch mean.
        return _TRL_COPY._compute_loss(self, model, inputs, return_outputs)
