"""`ISDPOTrainer`: TRL's `DPOTrainer` plus importance-sampled direct alignment (IS-DAA).

IS-DAA (https://huggingface.co/papers/2506.08681) multiplies the per-pair loss of every DPO `loss_type` by the clipped,
detached importance weight between the policy and the behaviour policy that generated the pair (see
`trl_rlvr_ext.losses.is_daa_weights`). The weight reuses the sequence log-probs TRL computes anyway: the policy's, and
the reference's (live or precomputed) or the dataset's `behavior_*_logps` columns. No extra forward pass.

With `importance_sampling=False` every override delegates to TRL unchanged, so the trainer is stock `DPOTrainer` to the
bit (tests/test_dpo_trainer.py proves it).

`_compute_loss` is TRL 1.16.0's `DPOTrainer._compute_loss`, copied verbatim, with four blocks inserted between
``# --- IS-DAA begin`` / ``# --- IS-DAA end`` markers: TRL has no hook between the per-pair loss and its batch mean.
tests/test_dpo_trainer.py checks that removing the marked blocks gives back TRL's source exactly, so a TRL upgrade
that touches the method fails loudly instead of silently diverging.
"""

import math
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from accelerate.utils import is_peft_model
from trl import DPOTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import use_adapter

from ..losses.is_daa import is_daa_clip, is_daa_log_weights, is_daa_weight_stats
from .behavior import (
    BEHAVIOR_CHOSEN_COLUMN,
    BEHAVIOR_COLUMNS,
    BEHAVIOR_REJECTED_COLUMN,
    _column_names,
    check_behavior_values,
    validate_behavior_columns,
)
from .dpo_config import BEHAVIOR_COLUMNS_REFERENCE, ISDPOConfig


# The behaviour log-prob columns of data prepared for the IS-DAA authors' code (mail-research/AIS-Sampling4DAAs): their
# trainer reads π_D from these when present. Here they are read only when `behavior_logps_columns` names them.
AUTHORS_BEHAVIOR_COLUMNS = ("chosen_logps", "rejected_logps")


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


class ISDPOTrainer(DPOTrainer):
    """[`~trl.DPOTrainer`] with importance-sampled direct alignment, configured by [`ISDPOConfig`].

    Each pair's loss (any per-pair `loss_type`, or a `loss_weights` mixture) is multiplied by the detached weight
    w = exp(min(log π_θ(y_w) − log π_D(y_w) + log π_θ(y_l) − log π_D(y_l), log C)), C = `is_weight_max`. π_D is read
    from the dataset columns `behavior_chosen_logps` / `behavior_rejected_logps` when present (add them with
    `trl_rlvr_ext.dpo.behavior.score_behavior_logps`), and is the reference policy otherwise. Works with an explicit
    `ref_model`, with `precompute_ref_log_probs`, and with PEFT (adapter-disabled or "ref"-adapter reference).

    Logged beside TRL's `rewards/*` (over the pairs of all processes): `is/weight_mean`, `is/weight_max`,
    `is/clipped_frac` (pairs at the cap) and `is/ess` (effective sample size fraction (Σw)²/(n·Σw²)).

    The constructor is `DPOTrainer`'s; `args` must be an [`ISDPOConfig`].
    """

    _tag_names: ClassVar[list[str]] = ["trl", "dpo", "trl-rlvr-ext", "is-dpo"]

    def __init__(self, model, ref_model=None, args: ISDPOConfig | None = None, *pargs, **kwargs):
        if args is not None and not isinstance(args, ISDPOConfig):
            raise TypeError(
                f"ISDPOTrainer needs `args` to be an ISDPOConfig, got {type(args).__name__}. Build it with "
                "`trl_rlvr_ext.ISDPOConfig(...)`: it takes every DPOConfig field plus the IS-DAA options."
            )
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            args = ISDPOConfig(f"{str(model_name).split('/')[-1] or 'model'}-IS-DPO")
        # Whether the datasets carry behaviour log-probs, by dataset name; set by `_prepare_dataset` during __init__
        self._behavior_columns: dict[str, bool] = {}
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
    def _log_importance_weights(self, mode: str, log_weights: torch.Tensor) -> None:
        """Push `is/*` diagnostics of this batch, over the pairs of all processes (as TRL's `rewards/*`)."""
        gathered = self.accelerator.gather(log_weights)
        stats = is_daa_weight_stats(gathered, self.args.is_weight_max)
        values = torch.stack([stats[key] for key in ("weight_mean", "weight_max", "clipped_frac", "ess")]).tolist()
        for key, value in zip(("weight_mean", "weight_max", "clipped_frac", "ess"), values, strict=True):
            self._metrics[mode][f"is/{key}"].append(value)

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

    # ---------------------------------------------------------------- the loss: TRL 1.16.0 + four IS-DAA blocks
    def _compute_loss(self, model, inputs, return_outputs):
        # --- IS-DAA begin
        # Stock TRL whenever importance sampling is off: the copy below only runs with it on.
        if not self.args.importance_sampling:
            return super()._compute_loss(model, inputs, return_outputs)
        inputs, behavior_logps = self._split_behavior_logps(inputs)
        # --- IS-DAA end
        mode = "train" if self.model.training else "eval"
        device = self.accelerator.device

        _non_model_keys = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}
        model_kwargs = {k: v for k, v in inputs.items() if k not in _non_model_keys}
        model_kwargs["use_cache"] = False
        # MoE models: request router logits so the model returns `outputs.aux_loss`. VLM wrappers honor this only
        # as a forward kwarg (not from the model config), so it must be passed here.
        if self.aux_loss_enabled:
            model_kwargs["output_router_logits"] = True
        completion_mask = inputs["completion_mask"]
        shift_completion_mask = completion_mask[..., 1:]
        labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
        outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
        # Prompt-learning PEFT prepends virtual tokens to the outputs; keep the positions of the real tokens
        seq_len = shift_completion_mask.size(1)
        per_token_logps = outputs.log_probs[:, -seq_len:]
        if self.ld_alpha is None:
            logps = per_token_logps.sum(dim=1)  # sum over sequence length
        else:
            comp_pos = shift_completion_mask.cumsum(dim=1)
            comp_lens = shift_completion_mask.sum(dim=1).long()
            chosen_lens, rejected_lens = comp_lens.chunk(2, dim=0)
            shared_lens = torch.minimum(chosen_lens, rejected_lens)
            shared_lens = torch.cat([shared_lens, shared_lens], dim=0).to(device)
            shared_mask = (comp_pos > 0) & (comp_pos <= shared_lens.unsqueeze(1))  # shared: 1 <= pos <= shared_len
            tail_mask = comp_pos > shared_lens.unsqueeze(1)  # tail: pos > shared_len
            shared_logps = (per_token_logps * shared_mask).sum(dim=1)
            tail_logps = (per_token_logps * tail_mask).sum(dim=1)
            logps = shared_logps + self.ld_alpha * tail_logps
        chosen_logps, rejected_logps = logps.chunk(2, dim=0)  # batch is [chosen, rejected]

        if self.precompute_ref_logps:
            ref_chosen_logps, ref_rejected_logps = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:
            # The reference forward only needs logits for log-probs. Drop `output_router_logits` so the frozen
            # reference model does not materialize router logits and compute a discarded MoE aux loss.
            ref_model_kwargs = {k: v for k, v in model_kwargs.items() if k != "output_router_logits"}
            # When gradient checkpointing is enabled with use_reentrant=True (non default), calling the model inside a
            # torch.no_grad() block triggers a harmless PyTorch warning ("None of the inputs have requires_grad=True").
            # Temporarily disable checkpointing to avoid this warning during inference.
            with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
                if is_peft_model(self.model) and self.ref_model is None:
                    # When training a PEFT adapter, how we obtain the reference depends on the setup:
                    # - New adapter: disabling adapters yields the base model.
                    # - Re-training an existing adapter: an initial copy is loaded under the name "ref".
                    ref_model_unwrapped = self.accelerator.unwrap_model(self.model)
                    with use_adapter(
                        ref_model_unwrapped, adapter_name="ref" if "ref" in ref_model_unwrapped.peft_config else None
                    ):
                        ref_outputs = self.model(**ref_model_kwargs, labels=labels, fused_lm_head=True)
                else:
                    ref_outputs = self.ref_model(**ref_model_kwargs, labels=labels, fused_lm_head=True)
            ref_per_token_logps = ref_outputs.log_probs[:, -seq_len:]
            if self.ld_alpha is None:
                ref_logps = ref_per_token_logps.sum(dim=1)  # sum over sequence length
            else:
                # reuse comp_pos/shared_mask/tail_mask computed above (they depend only on completion_mask)
                ref_shared_logps = (ref_per_token_logps * shared_mask).sum(dim=1)
                ref_tail_logps = (ref_per_token_logps * tail_mask).sum(dim=1)
                ref_logps = ref_shared_logps + self.ld_alpha * ref_tail_logps
            ref_chosen_logps, ref_rejected_logps = ref_logps.chunk(2, dim=0)  # batch is [chosen, rejected]

        # Get the log ratios for the chosen and rejected responses
        chosen_logratios = chosen_logps - ref_chosen_logps
        rejected_logratios = rejected_logps - ref_rejected_logps
        # --- IS-DAA begin
        # IS-DAA weight (https://huggingface.co/papers/2506.08681): log w = sg[(log π_θ(y_w) − log π_D(y_w)) +
        # (log π_θ(y_l) − log π_D(y_l))] on sequence sums (ld_alpha is rejected by the config), w = exp(min(log w,
        # log C)). π_D: the dataset's behaviour columns, else the reference, whose log-probs TRL has just computed or
        # read from the precomputed columns (no extra forward pass).
        if behavior_logps is None:
            behavior_chosen_logps, behavior_rejected_logps = ref_chosen_logps, ref_rejected_logps
        else:
            behavior_chosen_logps, behavior_rejected_logps = behavior_logps
        is_log_weights = is_daa_log_weights(
            chosen_logps, rejected_logps, behavior_chosen_logps, behavior_rejected_logps
        )
        is_weights = is_daa_clip(is_log_weights, self.args.is_weight_max)
        # --- IS-DAA end

        if self.f_divergence_type == "reverse_kl":  # standard DPO
            chosen_scores = chosen_logratios
            rejected_scores = rejected_logratios
        elif self.f_divergence_type == "forward_kl":
            # f'(t) = 1 - 1/t
            chosen_scores = 1 - torch.exp(-chosen_logratios)
            rejected_scores = 1 - torch.exp(-rejected_logratios)
        elif self.f_divergence_type == "js_divergence":
            # f'(t) = log(2t/(t+1)) = log 2 + logsigmoid(log t)
            chosen_scores = math.log(2) + F.logsigmoid(chosen_logratios)
            rejected_scores = math.log(2) + F.logsigmoid(rejected_logratios)
        elif self.f_divergence_type == "alpha_divergence":
            # alpha-divergence: f'(t) = (t^(α-1) - 1)/(α-1)
            if abs(self.f_alpha_divergence_coef - 1.0) < 1e-6:  # limit case f'(t) -> log(t), fall back to reverse_kl
                chosen_scores = chosen_logratios
                rejected_scores = rejected_logratios
            else:
                coef = 1.0 / (self.f_alpha_divergence_coef - 1.0)
                t_chosen = (self.f_alpha_divergence_coef - 1.0) * chosen_logratios
                t_rejected = (self.f_alpha_divergence_coef - 1.0) * rejected_logratios
                dtype = t_chosen.dtype
                # Clamp max so exp(.) stays representable after casting back
                clamp_max = {torch.float16: 11.0, torch.bfloat16: 80.0, torch.float32: 80.0}[dtype]
                t_chosen_float = torch.clamp(t_chosen.float(), max=clamp_max)
                t_rejected_float = torch.clamp(t_rejected.float(), max=clamp_max)
                chosen_scores = (torch.exp(t_chosen_float) - 1.0).to(dtype) * coef
                rejected_scores = (torch.exp(t_rejected_float) - 1.0).to(dtype) * coef
        else:
            raise ValueError(f"Unknown f_divergence_type: {self.f_divergence_type}")

        delta_score = chosen_scores - rejected_scores

        loss = 0.0
        for loss_type, loss_weight in zip(self.loss_types, self.loss_weights, strict=True):
            if loss_type == "sigmoid":
                per_sequence_loss = -F.logsigmoid(self.beta * delta_score)

            elif loss_type == "hinge":
                per_sequence_loss = torch.relu(1 - self.beta * delta_score)

            elif loss_type == "ipo":
                # IPO uses sequence-level log-prob differences; in code these are token-summed over the completion,
                # which makes the squared loss scale with completion length. We therefore normalize by the number of
                # completion tokens (average per token) to make β/loss comparable across variable lengths. This length
                # normalization is not explicitly discussed in the IPO paper; we confirmed this choice with the IPO
                # authors, and the results reported in the paper correspond to this normalized form.
                chosen_mask, rejected_mask = completion_mask.chunk(2, dim=0)
                chosen_avg_score = chosen_scores / chosen_mask.sum(dim=1).clamp(min=1.0)
                rejected_avg_score = rejected_scores / rejected_mask.sum(dim=1).clamp(min=1.0)
                ipo_delta = chosen_avg_score - rejected_avg_score
                # (Eq. 17) of the paper where beta is the regularization parameter for the IPO loss, denoted by τ.
                per_sequence_loss = (ipo_delta - 1 / (2 * self.beta)) ** 2

            elif loss_type == "exo_pair":
                # Implements EXO-pref from the paper https://huggingface.co/papers/2402.00856 (Eq. 16)
                # Minimize KL(p_fθ || p_rh) for K=2; p_fθ = softmax(βπ * (log πθ − log π_ref)) over {chosen, rejected}
                # p_rh = [(1−ε), ε]; expanded KL gives the weighted logsigmoid form below
                epsilon = torch.tensor(self.label_smoothing, device=device)
                qw = torch.sigmoid(self.beta * delta_score)
                log_qw = F.logsigmoid(self.beta * delta_score)
                log_pw = torch.log1p(-epsilon)
                ql = torch.sigmoid(-self.beta * delta_score)
                log_ql = F.logsigmoid(-self.beta * delta_score)
                log_pl = torch.log(epsilon)
                per_sequence_loss = qw * (log_qw - log_pw) + ql * (log_ql - log_pl)

            elif loss_type == "nca_pair":
                chosen_rewards = self.beta * chosen_logratios
                rejected_rewards = self.beta * rejected_logratios
                per_sequence_loss = (
                    -F.logsigmoid(chosen_rewards)
                    - 0.5 * F.logsigmoid(-chosen_rewards)
                    - 0.5 * F.logsigmoid(-rejected_rewards)
                )

            elif loss_type == "robust":
                clean_loss_term = -(1 - self.label_smoothing) * F.logsigmoid(self.beta * delta_score)
                flipped_loss_term = -self.label_smoothing * F.logsigmoid(-self.beta * delta_score)
                per_sequence_loss = (clean_loss_term - flipped_loss_term) / (1 - 2 * self.label_smoothing)

            elif loss_type == "bco_pair":
                chosen_rewards = self.beta * chosen_logratios
                rejected_rewards = self.beta * rejected_logratios
                per_sequence_loss = -F.logsigmoid(chosen_rewards) - F.logsigmoid(-rejected_rewards)

            elif loss_type == "sppo_hard":
                # In the paper (https://huggingface.co/papers/2405.00675), SPPO employs a soft probability approach,
                # estimated using the PairRM score. The probability calculation is conducted outside of the trainer
                # class. The version described here is the hard probability version, where P in Equation (4.7) of
                # Algorithm 1 is set to 1 for the winner and 0 for the loser.
                winner_margin_error = (chosen_logratios - 0.5 / self.beta) ** 2
                loser_margin_error = (rejected_logratios + 0.5 / self.beta) ** 2
                per_sequence_loss = winner_margin_error + loser_margin_error

            elif loss_type == "aot":
                logratios = chosen_logps - rejected_logps
                ref_logratios = ref_chosen_logps - ref_rejected_logps
                logratios_sorted, _ = torch.sort(logratios, dim=0)
                ref_logratios_sorted, _ = torch.sort(ref_logratios, dim=0)
                delta = logratios_sorted - ref_logratios_sorted
                per_sequence_loss = (
                    -F.logsigmoid(self.beta * delta) * (1 - self.label_smoothing)
                    - F.logsigmoid(-self.beta * delta) * self.label_smoothing
                )

            elif loss_type == "aot_unpaired":
                chosen_logratios_sorted, _ = torch.sort(chosen_logratios, dim=0)
                rejected_logratios_sorted, _ = torch.sort(rejected_logratios, dim=0)
                delta = chosen_logratios_sorted - rejected_logratios_sorted
                per_sequence_loss = (
                    -F.logsigmoid(self.beta * delta) * (1 - self.label_smoothing)
                    - F.logsigmoid(-self.beta * delta) * self.label_smoothing
                )

            elif loss_type == "apo_zero":
                # Eqn (7) of the APO paper (https://huggingface.co/papers/2408.06266)
                # Use this loss when you believe the chosen outputs are better than your model's default output
                # Increase chosen likelihood and decrease rejected likelihood
                losses_chosen = 1 - torch.sigmoid(self.beta * chosen_logratios)
                losses_rejected = torch.sigmoid(self.beta * rejected_logratios)
                per_sequence_loss = losses_chosen + losses_rejected

            elif loss_type == "apo_down":
                # Eqn (8) of the APO paper (https://huggingface.co/papers/2408.06266)
                # Use this loss when you believe the chosen outputs are worse than your model's default output.
                # Decrease chosen likelihood and decrease rejected likelihood more
                losses_chosen = torch.sigmoid(self.beta * chosen_logratios)
                losses_rejected = 1 - torch.sigmoid(self.beta * (chosen_logratios - rejected_logratios))
                per_sequence_loss = losses_chosen + losses_rejected

            elif loss_type == "discopop":
                # Eqn (5) of the DiscoPOP paper (https://huggingface.co/papers/2406.08414)
                logits = delta_score * self.beta
                # Modulate the mixing coefficient based on the log ratio magnitudes
                log_ratio_modulation = torch.sigmoid(logits / self.args.discopop_tau)
                logistic_component = -F.logsigmoid(logits)
                exp_component = torch.exp(-logits)
                # Blend between logistic and exponential component based on log ratio modulation
                per_sequence_loss = (
                    logistic_component * (1 - log_ratio_modulation) + exp_component * log_ratio_modulation
                )

            elif loss_type == "sft":
                chosen_mask, _ = shift_completion_mask.chunk(2, dim=0)
                chosen_per_token_logps, _ = per_token_logps.chunk(2, dim=0)
                batch_loss = -chosen_per_token_logps[chosen_mask.bool()].mean()
                batch_size = chosen_per_token_logps.size(0)
                # Implementation convenience: expand the scalar SFT loss to a per-sequence tensor so it matches the
                # shape of other losses; only the mean is used, so this is a no-op numerically.
                per_sequence_loss = batch_loss.expand(batch_size)

            elif loss_type == "sigmoid_norm":
                chosen_mask, rejected_mask = completion_mask.chunk(2, dim=0)
                chosen_avg_score = chosen_scores / chosen_mask.sum(dim=1).clamp(min=1.0)
                rejected_avg_score = rejected_scores / rejected_mask.sum(dim=1).clamp(min=1.0)
                delta = chosen_avg_score - rejected_avg_score
                per_sequence_loss = -F.logsigmoid(self.beta * delta)

            else:
                raise ValueError(
                    f"Unknown loss type: {loss_type}. Should be one of ['sigmoid', 'hinge', 'ipo', 'exo_pair', "
                    "'nca_pair', 'robust', 'bco_pair', 'sppo_hard', 'aot', 'aot_unpaired', 'apo_zero', 'apo_down', "
                    "'discopop', 'sft', 'sigmoid_norm']"
                )

            if self.use_weighting:
                # Eq (2) of the WPO paper: https://huggingface.co/papers/2406.11827
                completion_lengths = shift_completion_mask.sum(dim=1).clamp_min(1)
                with torch.no_grad():
                    aligned_logps = (per_token_logps - outputs.log_sum_sq_probs[:, -seq_len:]) * shift_completion_mask
                mean_logps = aligned_logps.sum(dim=1) / completion_lengths
                weights = torch.exp(mean_logps)
                chosen_weights, rejected_weights = weights.chunk(2, dim=0)
                per_sequence_loss *= chosen_weights * rejected_weights

            # --- IS-DAA begin
            # L = mean over pairs of w · ℓ(pair), for every loss type of the mixture (w is detached)
            per_sequence_loss = per_sequence_loss * is_weights
            # --- IS-DAA end
            loss += per_sequence_loss.mean() * loss_weight

        if self.aux_loss_enabled:
            aux_loss = outputs.aux_loss
            loss = loss + self.router_aux_loss_coef * aux_loss
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

        # Log the metrics
        # Entropy
        per_token_entropy = outputs.entropy[:, -seq_len:].detach()
        mask = shift_completion_mask
        entropy_sum = (per_token_entropy * mask).sum()
        total_tokens = mask.sum()

        # Gather counts across ranks and weight-average
        entropy_sum = self.accelerator.gather_for_metrics(entropy_sum).sum()
        total_tokens = self.accelerator.gather_for_metrics(total_tokens).sum()
        entropy = (entropy_sum / total_tokens).item() if total_tokens > 0 else 0.0
        self._metrics[mode]["entropy"].append(entropy)

        # Number of tokens
        if mode == "train":
            num_tokens_in_batch = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
            self._total_train_tokens += num_tokens_in_batch // self._tp_size
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]

        # Average logits for chosen and rejected completions
        chosen_mean_logits, rejected_mean_logits = outputs.mean_logits[:, -seq_len:].chunk(2, dim=0)
        chosen_mask, rejected_mask = shift_completion_mask.chunk(2, dim=0)
        total_chosen_logits = chosen_mean_logits[chosen_mask.bool()].sum()
        total_chosen_tokens = chosen_mask.sum()
        total_rejected_logits = rejected_mean_logits[rejected_mask.bool()].sum()
        total_rejected_tokens = rejected_mask.sum()
        total_chosen_logits = self.accelerator.gather_for_metrics(total_chosen_logits).sum().item()
        total_chosen_tokens = self.accelerator.gather_for_metrics(total_chosen_tokens).sum().item()
        total_rejected_logits = self.accelerator.gather_for_metrics(total_rejected_logits).sum().item()
        total_rejected_tokens = self.accelerator.gather_for_metrics(total_rejected_tokens).sum().item()
        avg_chosen_logits = total_chosen_logits / total_chosen_tokens if total_chosen_tokens > 0 else 0.0
        avg_rejected_logits = total_rejected_logits / total_rejected_tokens if total_rejected_tokens > 0 else 0.0
        self._metrics[mode]["logits/chosen"].append(avg_chosen_logits)
        self._metrics[mode]["logits/rejected"].append(avg_rejected_logits)

        # Token accuracy for the chosen completions
        chosen_is_top1, _ = outputs.is_top1[:, -seq_len:].chunk(2, dim=0)
        correct_predictions = chosen_is_top1 & chosen_mask.bool()
        total_tokens = chosen_mask.sum()
        correct_tokens = correct_predictions.sum()
        correct_tokens = self.accelerator.gather_for_metrics(correct_tokens)
        total_tokens = self.accelerator.gather_for_metrics(total_tokens)
        total_sum = total_tokens.sum()
        accuracy = (correct_tokens.sum() / total_sum).item() if total_sum > 0 else 0.0
        self._metrics[mode]["mean_token_accuracy"].append(accuracy)

        # Rewards for chosen and rejected completions
        chosen_rewards = self.beta * chosen_logratios.detach()
        rejected_rewards = self.beta * rejected_logratios.detach()
        agg_chosen_rewards = self.accelerator.gather(chosen_rewards)
        agg_rejected_rewards = self.accelerator.gather(rejected_rewards)
        self._metrics[mode]["rewards/chosen"].append(agg_chosen_rewards.mean().item())
        self._metrics[mode]["rewards/rejected"].append(agg_rejected_rewards.mean().item())

        # Reward accuracy
        reward_accuracies = (chosen_rewards > rejected_rewards).float()
        agg_reward_accuracies = self.accelerator.gather(reward_accuracies)
        self._metrics[mode]["rewards/accuracies"].append(agg_reward_accuracies.mean().item())

        # Reward margins
        margins = chosen_rewards - rejected_rewards
        agg_margins = self.accelerator.gather(margins)
        self._metrics[mode]["rewards/margins"].append(agg_margins.mean().item())

        # Average log probabilities for chosen and rejected completions
        self._metrics[mode]["logps/chosen"].append(self.accelerator.gather(chosen_logps).mean().item())
        self._metrics[mode]["logps/rejected"].append(self.accelerator.gather(rejected_logps).mean().item())

        # --- IS-DAA begin
        self._log_importance_weights(mode, is_log_weights)
        # --- IS-DAA end
        if return_outputs:
            warnings.warn(
                "`return_outputs=True`, and the logits it passes to `compute_metrics`, are deprecated and will be removed "
                "in v2.0.0. The fused LM head does not build the logits, so they are recomputed with an extra forward pass.",
                FutureWarning,
                stacklevel=2,
            )
            with torch.no_grad():
                outputs = model(**model_kwargs)
        return (loss, outputs) if return_outputs else loss
