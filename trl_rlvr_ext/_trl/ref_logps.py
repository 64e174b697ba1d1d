"""Reference log-probs computed exactly as the installed TRL's `DPOTrainer` computes them, for any supported TRL.

`trl_rlvr_ext.dpo.behavior.score_behavior_logps` must give the behaviour policy the numbers TRL would give it as a
reference model. TRL 1.15 and 1.16 run a fused log-prob LM head (`fused_lm_head=True`); TRL 1.14 takes the logits and
`selective_log_softmax`. Both paths follow `DPOTrainer.compute_ref_log_probs` of their release.
"""

import contextlib
from collections.abc import Callable, Iterator

import torch

from . import trl_minor


@contextlib.contextmanager
def _fused_log_probs(model):
    """Give ``model`` TRL's fused log-prob head for the duration of the block, then restore its forward."""
    from accelerate.utils import is_peft_model
    from trl.trainer.utils import add_fused_lm_head

    target = model.get_base_model() if is_peft_model(model) else model
    previous = target.__dict__.get("forward")
    add_fused_lm_head(target)
    try:
        yield
    finally:
        if previous is None:
            del target.forward
        else:
            target.forward = previous


@contextlib.contextmanager
def dpo_reference_token_logps(model) -> Iterator[Callable[[dict[str, torch.Tensor]], torch.Tensor]]:
    """Within the block, ``token_logps(batch)`` gives the per-token log-probs of a collated preference batch
    (``input_ids``, ``attention_mask``, ``completion_mask``) under ``model``: shape ``(B, L - 1)``, zero outside the
    completion tokens, so their sum over dim 1 is TRL's sequence log-prob. Call it under ``torch.no_grad()``."""
    if trl_minor() == "1.14":
        from trl.trainer.utils import selective_log_softmax

        def token_logps(batch):
            logits = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
            ).logits
            return selective_log_softmax(
                logits[..., :-1, :], batch["input_ids"][..., 1:], row_mask=batch["completion_mask"][..., 1:]
            )

        yield token_logps
        return

    def token_logps(batch):
        completion_mask = batch["completion_mask"]
        labels = batch["input_ids"].masked_fill(completion_mask == 0, -100)
        outputs = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            labels=labels,
            use_cache=False,
            fused_lm_head=True,
        )
        # Prompt-learning PEFT prepends virtual tokens to the outputs; keep the positions of the real tokens
        return outputs.log_probs[:, -(completion_mask.size(1) - 1) :]

    with _fused_log_probs(model):
        yield token_logps
