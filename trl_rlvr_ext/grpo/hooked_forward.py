"""One extra forward pass of the policy over a generation batch, with a forward hook: what DelTA and POISE read.

Both methods need hidden states that TRL's own passes do not keep (DelTA: the input of the LM head; POISE: one decoder
layer's output), and read them the way their authors do, in verl's old-log-prob pass: without gradient and without
dropout (`actor_module.eval()`). So this pass runs in eval mode (LoRA's dropout included), draws nothing from the
global RNG, and gives the trainer back in the mode it found it.
"""

import torch


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
