"""One extra forward pass of the policy over a generation batch, with a forward hook: what DelTA and POISE read.

Both methods need hidden states that TRL's own passes do not keep (DelTA: the input of the LM head; POISE: one decoder
layer's output), and read them the way their authors do, in verl's old-log-prob pass: without gradient and without
dropout (`actor_module.eval()`). So this pass runs in eval mode (LoRA's dropout included), draws nothing from the
global RNG, and gives the trainer back in the mode it found it.

`SharedOldLogpsPass` lets a method read its hidden states from the old-log-prob pass TRL already makes (when rollouts
are reused, or with vLLM's importance-sampling correction) instead of a pass of its own: the same call of
`_get_per_token_logps_and_entropies` on the same batch, so the same numbers, wherever TRL's pass (in the trainer's
mode) equals the eval-mode pass (`train_mode_changes_forward` says when it may not).
"""

import torch

from .signal_check import reuses_rollouts


# The multimodal inputs TRL's `_compute_loss` passes to `_get_per_token_logps_and_entropies`
FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def hooked_forward(trainer, module: torch.nn.Module, hook, output: dict, compute_entropy: bool = False):
    """TRL's `_get_per_token_logps_and_entropies` over the prompts and completions of `output` (in chunks of the
    per-device batch size, at TRL's temperature), with `hook` registered as a forward hook on `module` for the pass.
    Returns TRL's (log-probs, entropies or None) of the completion tokens."""
    model, args = trainer.model, trainer.args
    completion_ids = output["completion_ids"]
    handle = module.register_forward_hook(hook)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
                model,
                torch.cat([output["prompt_ids"], completion_ids], dim=1),
                torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
                completion_ids.size(1),
                batch_size=args.per_device_train_batch_size if was_training else args.per_device_eval_batch_size,
                compute_entropy=compute_entropy,
                **{key: output[key] for key in FORWARD_KEYS if output.get(key) is not None},
            )
    finally:
        handle.remove()
        model.train(was_training)
    return logps, entropies


def capture_completion_states(logits_to_keep: int, into: list):
    """A forward hook appending the hidden states at the positions that predict the completion tokens (position t
    predicts token t + 1: the last ``logits_to_keep`` positions but one) to ``into``: a copy, so that the prompt
    positions of the chunk's hidden states are freed."""

    def capture(module, module_args, module_output):
        into.append(module_output[0][:, -logits_to_keep - 1 : -1].detach().clone())

    return capture


def trl_scores_old_logps(trainer) -> bool:
    """Whether TRL's `_generate_and_score_completions` runs its old-log-prob pass (TRL's own condition): when a
    generation batch serves more than one optimizer step's micro-batches (``num_iterations`` > 1, or more generation
    steps than accumulation steps), or with vLLM's importance-sampling correction."""
    return reuses_rollouts(trainer.args) or bool(
        getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False)
    )


# Config fields of a transformers model that act only in training mode (dropout, MoE router noise)
_TRAIN_ONLY_CONFIG = ("dropout", "pdrop", "jitter")
# torch's dropout modules by their public names (their common base class is private)
_DROPOUTS = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)


def train_mode_changes_forward(model) -> str | None:
    """Why a no-grad forward of ``model`` in training mode may differ from one in eval mode (a dropout module with
    p > 0, e.g. LoRA's; a config field of dropout or router noise above 0), or None when nothing in it does."""
    for name, module in model.named_modules():
        if isinstance(module, _DROPOUTS) and module.p > 0:
            return f"its module {name} is a dropout with p={module.p}"
    from peft import PeftModel

    base = model.get_base_model() if isinstance(model, PeftModel) else model
    config = getattr(base, "config", None)
    configs = [config, *(getattr(config, key, None) for key in ("text_config", "vision_config"))] if config else []
    for sub in configs:
        if sub is None:
            continue
        for key, value in sub.to_dict().items():
            if any(word in key for word in _TRAIN_ONLY_CONFIG) and isinstance(value, (int, float)) and value > 0:
                return f"its config has {key}={value}"
    return None


class SharedOldLogpsPass:
    """Captures ``module``'s output during TRL's old-log-prob pass of one `_generate_and_score_completions` call.

    `wrap(call, inputs)` runs ``call`` (TRL's generation and scoring) with the trainer's
    `_get_per_token_logps_and_entropies` wrapped so that its first call on the policy carries ``hook_factory(logits
    _to_keep, list)`` as a forward hook on ``module``; `take(output)` then returns what the hook collected, and only
    when ``output["old_per_token_logps"]`` is the very tensor that pass returned (else None: the batch was rebuilt, or
    the first policy pass was another one)."""

    def __init__(self, trainer, module: torch.nn.Module, hook_factory=capture_completion_states):
        self.trainer, self.module, self.hook_factory = trainer, module, hook_factory
        self.captured = None

    def wrap(self, call, inputs):
        trainer = self.trainer
        self.captured = None
        if not trl_scores_old_logps(trainer):
            return call(inputs)
        own = trainer.__dict__.get("_get_per_token_logps_and_entropies")  # an instance override, if any
        forward = trainer._get_per_token_logps_and_entropies
        seen = {}

        def first_policy_pass(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
            if seen or model is not trainer.model:
                return forward(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
            seen["states"] = []
            handle = self.module.register_forward_hook(self.hook_factory(logits_to_keep, seen["states"]))
            try:
                out = forward(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
            finally:
                handle.remove()
            seen["logps"] = out[0]
            return out

        trainer._get_per_token_logps_and_entropies = first_policy_pass
        try:
            output = call(inputs)
        finally:
            if own is None:
                del trainer._get_per_token_logps_and_entropies
            else:
                trainer._get_per_token_logps_and_entropies = own
        if "logps" in seen:
            self.captured = seen
        return output

    def take(self, output: dict):
        """``(captured list, log-probs)`` of TRL's old-log-prob pass of ``output``, or None (see the class)."""
        captured, self.captured = self.captured, None
        if captured is None or output.get("old_per_token_logps") is not captured["logps"]:
            return None
        return captured["states"], captured["logps"]


def lm_backbone(trainer, setting: str) -> torch.nn.Module:
    """The module whose output is the hidden state entering the LM head: the transformers model's `base_model` (its
    backbone), which TRL's fused LM head also reads (`add_fused_lm_head`); under PEFT, that of the wrapped model.
    ``setting`` (e.g. ``"token_credit='delta'"``) names the option that needs it, in the error."""
    from peft import PeftModel

    model = trainer.accelerator.unwrap_model(trainer.model)
    if isinstance(model, PeftModel):
        model = model.get_base_model()
    backbone = model.base_model
    if backbone is model:
        off = setting.split("=")[0]
        raise ValueError(
            f"{setting} reads the hidden state entering the LM head from the model's backbone, but "
            f"{type(model).__name__} has none (its `base_model` is itself). Use a transformers causal LM (a backbone "
            f"plus an LM head), or turn {off} off."
        )
    return backbone
