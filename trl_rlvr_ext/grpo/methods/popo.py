"""POPO (`objective="popo"`, https://arxiv.org/abs/2605.06650): the EMA target, the predictor,
the weights at generation and the loss, as the authors' `POPOTrainer` (momo1443/colm2026-POPO@7f22607,
src/popo/trainer.py) runs them; the maths is `trl_rlvr_ext.losses.popo`.

- Rewards: the `rewards` hook keeps the gathered per-function rewards; a rollout is positive when their unweighted
  mean is > `popo_reward_threshold` (the authors' `_RewardInterceptor`).
- Weights (Eq. 8): once per generation batch, without gradient, from θ_old's token log-probs at the sampling
  temperature (TRL's `old_per_token_logps` when it computed them, else one extra forward, as the authors'). The mean
  log-probs and lengths are gathered over processes, so a group that straddles two processes is weighed whole.
- Loss: one forward with gradient; the entropy keeps its gradient; the pooled post-norm hidden states go through the
  predictor; the EMA target's pooled last hidden states, plus noise in training, are the target (no gradient).
- EMA (ξ ← τ·ξ + (1 − τ)·θ): TRL's `SyncRefModelCallback.sync_target_model` with α = 1 − τ after every optimizer
  step, over the trainable parameters. Frozen parameters (a LoRA run's base) are shared between the policy and the
  EMA copy, so under LoRA the EMA costs the adapter, not a second model; the authors' update also runs over frozen
  parameters, where τ·x + (1 − τ)·x is x up to float rounding.
- Predictor: its own param group (the model's lr and weight decay, under the scheduler), gradients averaged over
  processes before the step and zeroed after it. The authors' code never zeroes them (transformers zeroes only the
  model's gradients), so their predictor steps on gradients accumulated over the run; ours does not.
- Checkpoints: `popo_state.pt` (EMA tensors and predictor weights; its optimizer state is in `optimizer.pt`).
"""

import copy
import logging
from typing import ClassVar

import torch
from trl.trainer.callbacks import SyncRefModelCallback
from trl.trainer.utils import selective_log_softmax

from ...losses.popo import (
    PopoPredictor,
    entropy_from_logits,
    masked_mean_pool,
    mean_token_logps,
    popo_kl_k3,
    popo_loss,
    popo_weights_from_means,
)
from ..checkpoint_state import CheckpointState
from ..hooked_forward import lm_backbone
from ..method import GRPOMethod
from .popo_config import OBJECTIVES, PopoArguments, check_popo_config  # noqa: F401  (OBJECTIVES: imported from here too)


POPO_STATE_FILE = "popo_state.pt"
logger = logging.getLogger(__name__)


class Popo(GRPOMethod):
    name = "popo"
    Args = PopoArguments
    switches: ClassVar[dict] = {"objective": "grpo"}
    paper = "[POPO](https://arxiv.org/abs/2605.06650)"

    @classmethod
    def check(cls, args) -> None:
        check_popo_config(args)

    def setup(self, trainer) -> None:
        """The EMA copy and the predictor, built from the same seed on every process, so identical everywhere."""
        super().setup(trainer)
        args = self.args
        if self.trainer.is_deepspeed_enabled or self.trainer.is_fsdp_enabled:
            raise ValueError(
                "objective='popo' keeps an EMA copy of the policy and a predictor outside the model, which are not yet "
                "sharded: DeepSpeed and FSDP are refused. Use DDP (or one process)."
            )
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        backbone = model.get_base_model() if hasattr(model, "get_base_model") else model
        if backbone.base_model is backbone or not hasattr(model.config, "hidden_size"):
            raise ValueError(
                f"objective='popo' pools the last hidden states of the model's backbone, but {type(backbone).__name__} "
                "has no backbone or no config.hidden_size. Use a transformers causal LM."
            )
        # ξ₀ = θ₀ after any PEFT wrapping (the authors' deepcopy); frozen tensors shared, not copied (memo)
        frozen = {id(p): p for p in model.parameters() if not p.requires_grad}
        self.ema = copy.deepcopy(model, memo=frozen).requires_grad_(False).eval()
        pairs = [(n, t, o) for (n, o), t in zip(model.named_parameters(), self.ema.parameters(), strict=True)]
        trainable = [(n, t, o) for n, t, o in pairs if o.requires_grad]
        self.ema_names = [n for n, _, _ in trainable]
        self.ema_params = torch.nn.ParameterList([t for _, t, _ in trainable])
        self.online_params = torch.nn.ParameterList([o for _, _, o in trainable])
        low = sorted({str(p.dtype) for p in self.ema_params if p.dtype in (torch.bfloat16, torch.float16)})
        if low and 0 < args.popo_tau < 1:
            # ξ + (1 − τ)(θ − ξ) rounds back to ξ wherever the step is below half its spacing: the copy lags more than τ
            # says (the authors' code keeps the model's dtype too). Float32 trainable weights (LoRA's) avoid it.
            logger.warning(
                "objective='popo': the EMA copy holds trainable weights in %s, where an update (1 - popo_tau) * (theta - "
                "xi) = %g * (theta - xi) below half the spacing of xi is rounded away, so the target lags more than "
                "popo_tau says. Load the model in float32 (bf16=True still trains under autocast) or use LoRA.",
                ", ".join(low),
                1 - args.popo_tau,
            )
        with torch.random.fork_rng(devices=[]):  # the same predictor on every process; the global RNG untouched
            torch.manual_seed(args.seed)
            predictor = PopoPredictor(
                model.config.hidden_size, args.popo_predictor_hidden_dim, args.popo_predictor_layers
            )
        self.predictor = predictor.to(self.trainer.accelerator.device)
        self.rewards_per_func, self.negatives = None, None

    def checkpoint_states(self) -> list[CheckpointState]:
        return [
            CheckpointState(
                POPO_STATE_FILE,
                self.state_dict,
                self.load_state_dict,
                binary=True,
                missing="it was not saved by an objective='popo' run: POPO's EMA target and predictor cannot resume",
            )
        ]

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        ema = dict(zip(self.ema_names, self.ema_params, strict=True))
        return {
            "ema": {n: p.detach().cpu() for n, p in ema.items()},
            "predictor": {n: p.detach().cpu() for n, p in self.predictor.state_dict().items()},
        }

    def load_state_dict(self, state: dict, path: str) -> None:
        if sorted(state["ema"]) != sorted(self.ema_names):
            raise ValueError(f"{path}: its EMA tensors are not this model's trainable parameters.")
        with torch.no_grad():
            for name, param in zip(self.ema_names, self.ema_params, strict=True):
                param.copy_(state["ema"][name])
        self.predictor.load_state_dict(state["predictor"])

    # ---------------------------------------------------------------- overrides
    def optimizer(self, optimizer) -> None:
        if not any(
            p is q for g in optimizer.param_groups for p in g["params"] for q in self.predictor.parameters()
        ):  # one group, the model's lr and weight decay (the authors'), scheduled with the others
            params = list(self.predictor.parameters())
            optimizer.add_param_group(
                {"params": params, "lr": self.args.learning_rate, "weight_decay": self.args.weight_decay}
            )

    def rewards(self, rewards_per_func, inputs, completions):
        self.rewards_per_func = rewards_per_func  # gathered over processes, (N, F)
        return rewards_per_func

    def scored_batch(self, output: dict) -> None:
        output["popo_weights"], output["popo_positive"] = self.weights(output)

    # ---------------------------------------------------------------- weights (Eq. 8), once per generation batch
    def weights(self, output: dict) -> tuple[torch.Tensor, torch.Tensor]:
        args = self.args
        mode = "train" if self.trainer.model.training else "eval"
        rewards, self.rewards_per_func = self.rewards_per_func, None
        if rewards is None:
            raise RuntimeError("objective='popo' saw no rewards for this batch (_calculate_rewards was bypassed).")
        completion_ids, mask = output["completion_ids"], output["completion_mask"]
        batch_size = args.per_device_train_batch_size if mode == "train" else args.per_device_eval_batch_size
        logps = output.get("old_per_token_logps")
        if logps is None:  # θ_old's log-probs at the sampling temperature, as the authors' extra forward
            logps = self.completion_logps(output, batch_size)
        local_means, lengths = mean_token_logps(logps, mask)
        means, lengths = self.trainer.accelerator.gather(local_means), self.trainer.accelerator.gather(lengths)
        positive = rewards.mean(dim=1) > args.popo_reward_threshold  # unweighted mean; NaN (no reward): negative
        group = self.trainer.num_generations if mode == "train" else self.trainer.num_generations_eval
        weights = popo_weights_from_means(
            means,
            lengths,
            positive,
            group,
            weight_mode=args.popo_weight_mode,
            temperature=args.popo_weight_temperature,
            length_normalize=args.popo_length_normalize,
        )
        groups_with_positive = positive.view(-1, group).any(-1).float().mean().item()
        self.metric_store(mode)["popo/groups_with_positive"].append(groups_with_positive)
        self.metric_store(mode)["popo/weight_max"].append(weights.max().item())
        local = completion_ids.size(0)  # TRL's process slice
        rows = slice(
            self.trainer.accelerator.process_index * local, (self.trainer.accelerator.process_index + 1) * local
        )
        weights, positive = weights[rows].to(mask.device), positive[rows].to(mask.device)
        if args.popo_neg_logp_delta and mode == "train":
            self._log_neg_logp_delta(output, local_means, positive, batch_size)
        return weights, positive

    def completion_logps(self, rows: dict, batch_size: int) -> torch.Tensor:
        """The current policy's token log-probs of ``rows``' completions, without gradient, at the sampling
        temperature (TRL's forward)."""
        with torch.no_grad():
            logps, _, _ = self.trainer._get_per_token_logps_and_entropies(
                self.trainer.model,
                torch.cat([rows["prompt_ids"], rows["completion_ids"]], dim=1),
                torch.cat([rows["prompt_mask"], rows["completion_mask"]], dim=1),
                rows["completion_ids"].size(1),
                batch_size=batch_size,
            )
        return logps

    def _log_neg_logp_delta(self, output: dict, means: torch.Tensor, positive: torch.Tensor, batch_size: int):
        """`popo/neg_logp_delta`: the previous generation batch's negatives re-scored now, after the updates made on
        that batch: the mean change of their mean token log-prob, over every process (the "implicit negative
        gradient": no negative enters the loss, so any fall comes through the softmax over the vocabulary)."""
        keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
        previous = self.negatives
        self.negatives = {**{key: output[key][~positive] for key in keys}, "means": means[~positive]}
        if previous is None:  # the run's (or the resumed run's) first batch
            return
        local = torch.zeros(2, device=means.device)
        if previous["means"].numel():
            now, _ = mean_token_logps(self.completion_logps(previous, batch_size), previous["completion_mask"])
            local = torch.stack([(now - previous["means"]).sum(), torch.tensor(float(now.numel()), device=now.device)])
        total, count = self.trainer.accelerator.reduce(local, reduction="sum").tolist()
        if count > 0:
            self.metric_store("train")["popo/neg_logp_delta"].append(total / count)

    # ---------------------------------------------------------------- the loss (Eqs. 6, 7, 9, 10)
    def compute_loss(self, model, inputs):
        args = self.args
        mode = "train" if self.trainer.model.training else "eval"
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits_to_keep, start = completion_ids.size(1), prompt_ids.size(1)
        captured = {}
        # the post-norm last hidden states: the backbone's output (the authors hook `model.norm`, the same tensor)
        handle = lm_backbone(self.trainer, "objective='popo'").register_forward_hook(
            lambda module, module_args, module_output: captured.__setitem__("hidden", module_output[0])
        )
        try:
            # logits for the completion positions only (the backbone still runs, and the hook sees, every position)
            logits = model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=logits_to_keep + 1
            ).logits
        finally:
            handle.remove()
        logits = logits[:, :-1, :][:, -logits_to_keep:, :]
        if self.trainer.temperature != 1.0:  # x / 1 is x: no (B, T, V) copy and its backward (as TRL's log-softmax)
            logits = logits / self.trainer.temperature
        per_token_logps = selective_log_softmax(logits, completion_ids)
        entropies = entropy_from_logits(logits)  # with gradient: L_ent backpropagates
        del logits
        predictor = self.predictor
        online = masked_mean_pool(captured.pop("hidden")[:, start:], completion_mask)
        predicted = predictor(online.to(next(predictor.parameters()).dtype))
        monitor = (
            mode == "train"
            and args.popo_kl_monitor_steps > 0
            and self.trainer.state.global_step > 0
            and self.trainer.state.global_step % args.popo_kl_monitor_steps == 0
        )
        with torch.no_grad():  # the target: the EMA model's pooled last hidden states (stop-gradient)
            target_out = self.ema(
                input_ids=input_ids,
                attention_mask=attention_mask,
                use_cache=False,
                output_hidden_states=True,
                logits_to_keep=logits_to_keep + 1 if monitor else 1,  # logits only where the KL monitor reads them
            )
            target = masked_mean_pool(target_out.hidden_states[-1][:, start:], completion_mask)
            noise = None
            if self.trainer.model.training and args.popo_feature_noise_std > 0:  # the authors' draw: the global RNG
                noise = torch.randn_like(target) * args.popo_feature_noise_std
        out = popo_loss(
            per_token_logps,
            entropies,
            completion_mask,
            inputs["popo_weights"],
            inputs["popo_positive"],
            predicted,
            target,
            alpha=args.popo_alpha,
            beta_entropy=args.popo_beta_entropy,
            target_noise=noise,
        )
        positive_ratio = inputs["popo_positive"].float().mean()
        values = torch.stack([out.nll, out.sim, out.ent, out.entropy, positive_ratio.to(out.nll.device)]).float()
        names = ["nll_loss", "sim_loss", "ent_loss", "entropy", "positive_ratio"]
        for name, value in zip(names, self.trainer.accelerator.reduce(values, reduction="mean").tolist(), strict=True):
            self.metric_store(mode)[f"popo/{name}"].append(value)
        if monitor:  # logged only; the EMA's log-probs at the sampling temperature, as the policy's
            target_logits = target_out.logits[:, :-1, :][:, -logits_to_keep:, :] / self.trainer.temperature
            kl = popo_kl_k3(per_token_logps, selective_log_softmax(target_logits, completion_ids), completion_mask)
            self.metric_store(mode)["popo/kl_to_ema"].append(
                self.trainer.accelerator.reduce(kl, reduction="mean").item()
            )
        normalizer = self.trainer.current_gradient_accumulation_steps if mode == "train" else 1.0  # as TRL's
        return out.loss / normalizer

    # ---------------------------------------------------------------- around the optimizer step
    def on_pre_optimizer_step(self, state) -> None:
        self.reduce_predictor_grads()

    def on_step_end(self, state) -> None:
        self.ema_step()

    def reduce_predictor_grads(self) -> None:
        # The policy's gradients are averaged by DDP; the predictor, outside it, is averaged here so that it stays
        # identical on every process (the authors wrap it in DDP).
        if self.trainer.accelerator.num_processes == 1:
            return
        for param in self.predictor.parameters():
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            param.grad.copy_(self.trainer.accelerator.reduce(param.grad, reduction="mean"))

    def ema_step(self) -> None:
        # ξ ← τ·ξ + (1 − τ)·θ = TRL's sync with α = 1 − τ, over the trainable parameters
        SyncRefModelCallback.sync_target_model(self.online_params, self.ema_params, 1.0 - self.args.popo_tau)
        self.predictor.zero_grad()
