"""POISE in `RLVRGRPOTrainer` (`value_baseline="poise"`): features from the policy's hidden states, the sibling
baseline in place of TRL's group mean, the probe's online state in checkpoints.

- `_calculate_rewards`: the rewards arrive gathered over processes; their weighted sum (TRL's total reward) is kept.
- `_generate_and_score_completions`, after TRL's: one forward pass without gradient over this process's generation
  batch, with a forward hook on decoder layer `poise_layer` that pools the prompt and the response (the authors'
  capture, `dp_actor._build_hidden_capture`), and the token entropies of the same pass (the three scalar features).
  The features are gathered over processes, in TRL's order, so every process predicts, computes the advantages and
  refits the probe on the same data with the same float64 CPU arithmetic: the probe is the same everywhere. This
  process's slice of the advantages replaces `output["advantages"]`; nothing else of TRL's batch changes.
- The state (`PoiseValueBaseline`: buffer, probe, counters) goes in every checkpoint (`poise_state_{rank}.pth`, one
  per process, all equal) and is restored on resume.

The maths is in `trl_rlvr_ext.losses.poise`. Evaluation batches keep TRL's advantages (the probe is not used there).
"""

import math

import torch

from ..curation.dynamic import total_rewards
from ..losses.poise import (
    POISE_PAPER_SETTINGS,
    PoiseValueBaseline,
    masked_mean,
    poise_diagnostics,
    pool_last_n,
    span_masks,
    truncate_after_last,
)
from .checkpoint_state import CheckpointState
from .hooked_forward import hooked_forward


# The authors' hard-coded tags: the response is cut after its last `</think>` before pooling; the reasoning and answer
# entropies read `<think>…</think>` and `<answer>…</answer>` (else what follows `</think>`).
_THINK = ("<think>", "</think>")
_ANSWER = ("<answer>", "</answer>")


class PoiseBaselineMixin:
    """`value_baseline="poise"`: see the module docstring."""

    _poise = None  # the online state; None: option off, every override here only delegates to TRL

    def _poise_setup(self) -> None:
        args = self.args
        self._poise = None
        if args.value_baseline != "poise":
            return
        layers = self._poise_layers()
        layer = args.poise_layer
        if layer is None:  # the authors' Qwen3-4B choice, 19 of 36, as a fraction
            layer = round(POISE_PAPER_SETTINGS["layer_fraction"] * len(layers))
        if not 0 <= layer < len(layers):
            raise ValueError(f"poise_layer={layer} is not a decoder layer of this model, which has {len(layers)}.")
        self._poise_layer_module = layers[layer]
        self._poise_layer = layer
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        encode = lambda tag: tokenizer.encode(tag, add_special_tokens=False)  # noqa: E731
        self._poise_think = tuple(encode(tag) for tag in _THINK)
        self._poise_answer = tuple(encode(tag) for tag in _ANSWER)
        self._poise = PoiseValueBaseline(
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
        self._poise_rewards = None
        self._register_checkpoint_state(
            CheckpointState(
                "poise_state_{rank}.pth",
                self._poise.state_dict,
                lambda state, path: self._poise.load_state_dict(state),
                per_rank=True,
                missing="it was saved by a run without value_baseline='poise', so the probe and its buffer cannot be "
                "restored. Resume with the settings of the run that saved it, or start a new run.",
            )
        )

    def _poise_layers(self) -> torch.nn.ModuleList:
        """The decoder layers, found as the authors do (`model.layers`, `transformer.h`, `gpt_neox.layers`) under the
        PEFT and accelerate wrappers."""
        from peft import PeftModel

        model = self.accelerator.unwrap_model(self.model)
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

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._poise is not None:  # gathered over processes: TRL's total reward, the one its advantages use
            self._poise_rewards = total_rewards(rewards_per_func, self.reward_weights)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self._poise is not None:
            if self.model.training:
                self._poise_replace_advantages(output)
            self._poise_rewards = None  # an evaluation batch's rewards never reach the probe
        return output

    def _poise_features(self, output: dict) -> torch.Tensor:
        """This process's rows [prompt feature, response feature, 3 entropies], float32, from one forward pass without
        gradient and without dropout (`hooked_forward`; the authors capture in verl's old-log-prob pass)."""
        args = self.args
        prompt_ids, prompt_mask = output["prompt_ids"], output["prompt_mask"]
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        response_valid = truncate_after_last(completion_ids, completion_mask, self._poise_think[1])
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

        _, entropies = hooked_forward(self, self._poise_layer_module, capture, output, compute_entropy=True)
        if row[0] != prompt_ids.size(0):
            raise RuntimeError(
                f"value_baseline='poise': layer {self._poise_layer} ran on {row[0]} rows for a batch of "
                f"{prompt_ids.size(0)}: the layer was not called once per row (a model that skips or repeats layers)."
            )
        reasoning, answer = span_masks(completion_ids, completion_mask, self._poise_think, self._poise_answer)
        scalars = torch.stack([masked_mean(entropies, m) for m in (completion_mask, reasoning, answer)], dim=1)
        return torch.cat([torch.cat(pooled), scalars.float()], dim=1)

    def _poise_replace_advantages(self, output: dict) -> None:
        rewards = self._poise_rewards
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
        features = self.accelerator.gather(self._poise_features(output)).cpu()
        dim = (features.shape[1] - 3) // 2
        prompt, response, scalars = features[:, :dim], features[:, dim : 2 * dim], features[:, 2 * dim :]
        rewards = rewards.float().cpu()
        result, predictions = self._poise.advantages(rewards, prompt, response, scalars)
        local = output["advantages"].shape[0]
        start = self.accelerator.process_index * local
        output["advantages"] = result.advantages[start : start + local].to(output["advantages"].device)
        logged = self._logs["advantages"]  # TRL logged its own (all processes'): the completions table shows ours
        for k, value in enumerate(result.advantages.tolist()):
            logged[len(logged) - len(result.advantages) + k] = value
        refit = self._poise.update(prompt, response, scalars, result.targets)
        self._poise_log(rewards, result, predictions, refit)

    def _poise_log(self, rewards, result, predictions, refit: bool) -> None:
        state, metrics = self._poise, self._metrics["train"]
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
