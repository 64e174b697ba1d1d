"""POISE's value baseline (`value_baseline="poise"`, https://arxiv.org/abs/2605.07579): features from the policy's
hidden states, the sibling baseline in place of TRL's group mean, the probe's online state in checkpoints.

- `rewards`: the rewards arrive gathered over processes; their weighted sum (TRL's total reward) is kept.
- `scored_batch` (training batches): one forward pass without gradient over this process's generation batch, with a
  forward hook on decoder layer `poise_layer` that pools the prompt and the response (the authors' capture,
  `dp_actor._build_hidden_capture`), and the token entropies of the same pass (the three scalar features). The
  features are gathered over processes, in TRL's order, so every process predicts, computes the advantages and refits
  the probe on the same data with the same float64 CPU arithmetic: the probe is the same everywhere. This process's
  slice of the advantages replaces the batch's `advantages` (DelTA, NSR, ACPO and RSI-S then act on them); nothing
  else of TRL's batch changes.
- The state (`PoiseValueBaseline`: buffer, probe, counters) goes in every checkpoint (`poise_state_{rank}.pth`, one
  per process, all equal) and is restored on resume.

The maths is in `trl_rlvr_ext.losses.poise`. Evaluation batches keep TRL's advantages (the probe is not used there).
"""

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ...curation.dynamic import total_rewards
from ...losses.poise import (
    POISE_PAPER_SETTINGS,
    POISE_TARGET_MODES,
    PoiseValueBaseline,
    masked_mean,
    poise_diagnostics,
    pool_last_n,
    span_masks,
    truncate_after_last,
)
from ..checkpoint_state import CheckpointState
from ..hooked_forward import hooked_forward
from ..method import GRPOMethod


VALUE_BASELINES = ("none", "poise")
# The authors' hard-coded tags: the response is cut after its last `</think>` before pooling; the reasoning and answer
# entropies read `<think>…</think>` and `<answer>…</answer>` (else what follows `</think>`).
_THINK = ("<think>", "</think>")
_ANSWER = ("<answer>", "</answer>")


@dataclass
class PoiseArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
        value_baseline (`str`, *optional*, defaults to `"none"`):
            The advantage's baseline. `"none"`: stock TRL (the group mean). `"poise"`: POISE ("Policy Optimization with
            Internal State Value Estimation", https://arxiv.org/abs/2605.07579, code https://github.com/holi-lab/POISE):
            A_i = r_i − b_i with b_i the mean of the *sibling* rollouts' predicted values v_j, v = a ridge probe on
            the policy's own hidden states at decoder layer `poise_layer` (prompt and response pooled over their
            last `poise_pool_n` tokens, reduced by PCA to `poise_prompt_pca` / `poise_response_pca` dimensions) plus
            three mean token entropies; no std normalisation. The probe learns the sibling's reward online from a
            buffer of `poise_buffer_rows` rows, refitted every generation batch after `poise_warmup_steps`; the first
            `poise_bootstrap_steps` batches use A_i = r_i − target_i (RLOO's r_i − r_j) while the buffer fills. One extra forward pass
            without gradient per generation batch; the features are gathered over processes, so the probe is the same
            on every one; its state is saved in checkpoints. Needs num_generations=2 (the authors' scratch bootstrap),
            scale_rewards="none". Logged as `poise/*` (`trl_rlvr_ext.losses.poise`).
        poise_layer (`int`, *optional*):
            POISE: the decoder layer (0-based) whose output is read. Defaults to round(19/36 × layers), the authors'
            Qwen3-4B choice (19 of 36; OLMo-3-7B: 7 of 32).
        poise_pool_n (`int`, *optional*, defaults to `10`):
            POISE: the prompt and response features are the mean of their last n valid tokens (the response cut after
            its last `</think>`). Authors: 10 (Qwen3-4B), 32 (OLMo-3-7B).
        poise_prompt_pca (`int`, *optional*, defaults to `32`):
            POISE: PCA dimensions of the prompt feature (0: the raw hidden state). Authors: 32 (Qwen3-4B), 16 (OLMo).
        poise_response_pca (`int`, *optional*, defaults to `64`):
            POISE: PCA dimensions of the response feature (0: the raw hidden state). Authors: 64 (Qwen3-4B), 128
            (OLMo).
        poise_alpha (`float`, *optional*, defaults to `100.0`):
            POISE: the ridge penalty on the standardised features. Authors: 100 (Qwen3-4B), 1000 (OLMo).
        poise_clip_min (`float`, *optional*, defaults to `0.0`):
            POISE: predictions are clipped to [poise_clip_min, poise_clip_max] (authors: [0, 1], for 0/1 rewards).
        poise_clip_max (`float`, *optional*, defaults to `1.0`):
            POISE: see `poise_clip_min`.
        poise_buffer_rows (`int`, *optional*, defaults to `4096`):
            POISE: the probe's training rows (one per rollout) kept, oldest prompt groups dropped first. Authors: 4096
            (math), 3072 (code, other).
        poise_warmup_steps (`int`, *optional*, defaults to `8`):
            POISE: the probe is refitted after a batch only once this many batches were observed (the bootstrap
            counts). Authors: 8.
        poise_bootstrap_steps (`int`, *optional*, defaults to `16`):
            POISE: generation batches trained with A_i = r_i − target_i (the authors' bootstrap: RLOO with the default
            target, r_i − (r_i + r_j)/2 with "pair_average") before the first fit of the probe. Authors: 16.
        poise_target_mode (`str`, *optional*, defaults to `"other_rollout_correctness"`):
            POISE: the probe's target for rollout i: the mean reward of its siblings (the authors') or
            `"pair_average"` (the group's mean reward).
    """

    value_baseline: str = field(
        default="none",
        metadata={
            "help": "The advantage's baseline: 'none' (stock TRL, the group mean) or 'poise' (POISE, "
            "https://arxiv.org/abs/2605.07579: A_i = r_i - mean of the sibling rollouts' values, predicted by a ridge "
            "probe on the policy's hidden states, fitted online; A = r - target for the first poise_bootstrap_steps batches). "
            "Needs num_generations=2 and scale_rewards='none'.",
            "choices": list(VALUE_BASELINES),
        },
    )
    poise_layer: int | None = field(
        default=None,
        metadata={"help": "POISE: decoder layer read (0-based). Default: round(19/36 x layers) (authors: 19 of 36)."},
    )
    poise_pool_n: int = field(
        default=POISE_PAPER_SETTINGS["pool_n"],
        metadata={"help": "POISE: features are the mean of the last n valid prompt / response tokens (authors: 10)."},
    )
    poise_prompt_pca: int = field(
        default=POISE_PAPER_SETTINGS["prompt_pca"],
        metadata={"help": "POISE: PCA dimensions of the prompt feature, 0: raw (authors: 32)."},
    )
    poise_response_pca: int = field(
        default=POISE_PAPER_SETTINGS["response_pca"],
        metadata={"help": "POISE: PCA dimensions of the response feature, 0: raw (authors: 64)."},
    )
    poise_alpha: float = field(
        default=POISE_PAPER_SETTINGS["alpha"], metadata={"help": "POISE: ridge penalty (authors: 100)."}
    )
    poise_clip_min: float = field(
        default=POISE_PAPER_SETTINGS["clip_min"], metadata={"help": "POISE: lowest prediction (authors: 0)."}
    )
    poise_clip_max: float = field(
        default=POISE_PAPER_SETTINGS["clip_max"], metadata={"help": "POISE: highest prediction (authors: 1)."}
    )
    poise_buffer_rows: int = field(
        default=POISE_PAPER_SETTINGS["buffer_rows"],
        metadata={"help": "POISE: probe training rows kept, oldest prompt groups first out (authors: 4096)."},
    )
    poise_warmup_steps: int = field(
        default=POISE_PAPER_SETTINGS["warmup_steps"],
        metadata={"help": "POISE: refit the probe once this many batches were observed (authors: 8)."},
    )
    poise_bootstrap_steps: int = field(
        default=POISE_PAPER_SETTINGS["bootstrap_steps"],
        metadata={
            "help": "POISE: generation batches with A = r - target (RLOO with the default target) before the first "
            "fit (authors: 16)."
        },
    )
    poise_target_mode: str = field(
        default=POISE_PAPER_SETTINGS["target_mode"],
        metadata={
            "help": "POISE: the probe's target: the siblings' mean reward (other_rollout_correctness, the authors') "
            "or the group's (pair_average).",
            "choices": list(POISE_TARGET_MODES),
        },
    )


class Poise(GRPOMethod):
    name = "poise"
    Args = PoiseArguments
    switches: ClassVar[dict] = {"value_baseline": "none"}
    paper = "[POISE](https://arxiv.org/abs/2605.07579)"

    @classmethod
    def check(cls, args) -> None:
        # POISE (https://arxiv.org/abs/2605.07579): what it replaces and what it cannot be combined with
        if args.value_baseline not in VALUE_BASELINES:
            raise ValueError(
                f"value_baseline={args.value_baseline!r} is not supported. Use one of {list(VALUE_BASELINES)}."
            )
        if args.value_baseline == "none":
            return
        if args.num_generations != 2:
            raise ValueError(
                f"value_baseline='poise' needs num_generations=2, got {args.num_generations}: the authors' run starts "
                "from scratch with an RLOO bootstrap that requires n = 2 (each rollout's baseline is its one sibling's "
                "predicted value). Set num_generations=2 and spend the rollouts on more prompts."
            )
        if args.scale_rewards != "none":
            raise ValueError(
                f"value_baseline='poise' replaces the advantages by r_i - b_i without std normalisation (the authors'), "
                f"but scale_rewards={args.scale_rewards!r} asks for a normalisation it would silently drop. Set "
                "scale_rewards='none'."
            )
        if args.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "value_baseline='poise' regresses the weighted sum of the rewards: set "
                "multi_objective_aggregation='sum_then_normalize'."
            )
        counts = {
            "poise_pool_n": args.poise_pool_n,
            "poise_warmup_steps": args.poise_warmup_steps,
            "poise_bootstrap_steps": args.poise_bootstrap_steps,
        }
        for name, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r} (authors: {POISE_PAPER_SETTINGS}).")
        for name in ("poise_prompt_pca", "poise_response_pca"):
            value = getattr(args, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (0: no projection), got {value!r}.")
        layer = args.poise_layer
        if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 0):
            raise ValueError(f"poise_layer must be a 0-based layer index >= 0, or None, got {args.poise_layer!r}.")
        if not args.poise_alpha > 0:
            raise ValueError(f"poise_alpha must be > 0 (authors: 100), got {args.poise_alpha!r}.")
        if not args.poise_clip_min < args.poise_clip_max:
            raise ValueError(
                f"poise_clip_min ({args.poise_clip_min!r}) must be < poise_clip_max ({args.poise_clip_max!r})."
            )
        if args.poise_buffer_rows < args.num_generations:
            raise ValueError(
                f"poise_buffer_rows ({args.poise_buffer_rows}) must hold at least one prompt group "
                f"({args.num_generations} rows); the authors keep 4096."
            )
        if args.poise_target_mode not in POISE_TARGET_MODES:
            raise ValueError(
                f"poise_target_mode={args.poise_target_mode!r} is not supported. Use one of {list(POISE_TARGET_MODES)}."
            )

    def setup(self, trainer) -> None:
        super().setup(trainer)
        args = self.args
        layers = self.decoder_layers()
        layer = args.poise_layer
        if layer is None:  # the authors' Qwen3-4B choice, 19 of 36, as a fraction
            layer = round(POISE_PAPER_SETTINGS["layer_fraction"] * len(layers))
        if not 0 <= layer < len(layers):
            raise ValueError(f"poise_layer={layer} is not a decoder layer of this model, which has {len(layers)}.")
        self.layer_module = layers[layer]
        self.layer = layer
        tokenizer = getattr(self.trainer.processing_class, "tokenizer", self.trainer.processing_class)
        encode = lambda tag: tokenizer.encode(tag, add_special_tokens=False)  # noqa: E731
        self.think = tuple(encode(tag) for tag in _THINK)
        self.answer = tuple(encode(tag) for tag in _ANSWER)
        self.baseline = PoiseValueBaseline(
            args.num_generations,
            prompt_pca=args.poise_prompt_pca,
            response_pca=args.poise_response_pca,
            alpha=args.poise_alpha,
            clip_min=args.poise_clip_min,
            clip_max=args.poise_clip_max,
            buffer_rows=args.poise_buffer_rows,
            warmup_steps=args.poise_warmup_steps,
            bootstrap_steps=args.poise_bootstrap_steps,
            target_mode=args.poise_target_mode,
        )
        self.pending_rewards = None

    def checkpoint_states(self) -> list[CheckpointState]:
        return [
            CheckpointState(
                "poise_state_{rank}.pth",
                self.baseline.state_dict,
                lambda state, path: self.baseline.load_state_dict(state),
                per_rank=True,
                missing="it was saved by a run without value_baseline='poise', so the probe and its buffer cannot be "
                "restored. Resume with the settings of the run that saved it, or start a new run.",
            )
        ]

    def decoder_layers(self) -> torch.nn.ModuleList:
        """The decoder layers, found as the authors do (`model.layers`, `transformer.h`, `gpt_neox.layers`) under the
        PEFT and accelerate wrappers."""
        from peft import PeftModel

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        if isinstance(model, PeftModel):
            model = model.get_base_model()
        for outer, inner in (("model", "layers"), ("transformer", "h"), ("gpt_neox", "layers")):
            layers = getattr(getattr(model, outer, None), inner, None)
            if isinstance(layers, torch.nn.ModuleList):
                return layers
        raise ValueError(
            f"value_baseline='poise' reads one decoder layer's output, but {type(model).__name__} has none of "
            "model.layers, transformer.h, gpt_neox.layers. Use a transformers causal LM, or value_baseline='none'."
        )

    def rewards(self, rewards_per_func, inputs, completions):
        # gathered over processes: TRL's total reward, the one its advantages use
        self.pending_rewards = total_rewards(rewards_per_func, self.trainer.reward_weights)
        return rewards_per_func

    def scored_batch(self, output: dict) -> None:
        if self.trainer.model.training:
            self.replace_advantages(output)
        self.pending_rewards = None  # an evaluation batch's rewards never reach the probe

    def features(self, output: dict) -> torch.Tensor:
        """This process's rows [prompt feature, response feature, 3 entropies], float32, from one forward pass without
        gradient and without dropout (`hooked_forward`; the authors capture in verl's old-log-prob pass)."""
        args = self.args
        prompt_ids, prompt_mask = output["prompt_ids"], output["prompt_mask"]
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        response_valid = truncate_after_last(completion_ids, completion_mask, self.think[1])
        prompt_len, pooled, row = prompt_ids.size(1), [], [0]

        def capture(module, module_args, module_output):
            hidden = module_output[0] if isinstance(module_output, tuple) else module_output
            rows = slice(row[0], row[0] + hidden.size(0))
            pooled.append(
                torch.cat(
                    [
                        pool_last_n(hidden[:, :prompt_len], prompt_mask[rows], args.poise_pool_n),
                        pool_last_n(hidden[:, prompt_len:], response_valid[rows], args.poise_pool_n),
                    ],
                    dim=1,
                )
            )
            row[0] += hidden.size(0)

        _, entropies = hooked_forward(self.trainer, self.layer_module, capture, output, compute_entropy=True)
        if row[0] != prompt_ids.size(0):
            raise RuntimeError(
                f"value_baseline='poise': layer {self.layer} ran on {row[0]} rows for a batch of "
                f"{prompt_ids.size(0)}: the layer was not called once per row (a model that skips or repeats layers)."
            )
        reasoning, answer = span_masks(completion_ids, completion_mask, self.think, self.answer)
        scalars = torch.stack([masked_mean(entropies, m) for m in (completion_mask, reasoning, answer)], dim=1)
        return torch.cat([torch.cat(pooled), scalars.float()], dim=1)

    def replace_advantages(self, output: dict) -> None:
        rewards = self.pending_rewards
        if rewards is None:
            raise RuntimeError(
                "value_baseline='poise' saw no rewards for the batch (_calculate_rewards was bypassed)."
            )
        if torch.isnan(rewards).any():
            raise ValueError(
                f"value_baseline='poise' got {int(torch.isnan(rewards).sum())} completion(s) no reward function scored: "
                "POISE regresses every rollout's reward and has no rule for a missing one. Make the reward functions "
                "score every completion (e.g. reward_on_error='zero')."
            )
        features = self.trainer.accelerator.gather(self.features(output)).cpu()
        dim = (features.shape[1] - 3) // 2
        prompt, response, scalars = features[:, :dim], features[:, dim : 2 * dim], features[:, 2 * dim :]
        rewards = rewards.float().cpu()
        result, predictions = self.baseline.advantages(rewards, prompt, response, scalars)
        local = output["advantages"].shape[0]
        start = self.trainer.accelerator.process_index * local
        output["advantages"] = result.advantages[start : start + local].to(output["advantages"].device)
        logged = self.trainer._logs[
            "advantages"
        ]  # TRL logged its own (all processes'): the completions table shows ours
        for k, value in enumerate(result.advantages.tolist()):
            logged[len(logged) - len(result.advantages) + k] = value
        refit = self.baseline.update(prompt, response, scalars, result.targets)
        self._log(rewards, result, predictions, refit)

    def _log(self, rewards, result, predictions, refit: bool) -> None:
        state, metrics = self.baseline, self.metric_store("train")
        metrics["poise/phase"].append(0.0 if predictions is None else 1.0)
        metrics["poise/advantage_mean"].append(result.advantages.mean().item())
        metrics["poise/advantage_std"].append(result.advantages.std(unbiased=False).item())
        metrics["poise/baseline_mean"].append(result.baselines.mean().item())
        metrics["poise/buffer_rows"].append(float(state.buffer["targets"].shape[0]))
        metrics["poise/refit"].append(float(refit))
        metrics["poise/retrain_count"].append(float(state.retrain_count))
        if predictions is not None:
            args = self.args
            diagnostics = poise_diagnostics(
                rewards, predictions, result.targets, args.num_generations, args.poise_clip_min, args.poise_clip_max
            )
            for name, value in diagnostics.items():
                if not math.isnan(value):
                    metrics[f"poise/{name}"].append(value)
