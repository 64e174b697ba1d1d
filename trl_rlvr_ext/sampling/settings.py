"""`SamplingSettings`: how completions are drawn, as one validated value, and the `GenerationBackend` protocol."""

import dataclasses
import inspect
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingSettings:
    r"""
    How a backend draws completions: one value that evaluation, offline curation and the toy evaluation pass around
    instead of loose keyword arguments. Frozen; derive variants with `dataclasses.replace`, `offset_seed` or
    `as_greedy`.

    Args:
        num_samples (`int`, defaults to `1`):
            Completions drawn per prompt.
        temperature (`float`, defaults to `1.0`):
            Softmax temperature of the sampling (ignored when ``greedy``). ``0`` is greedy to vLLM and an error to
            `TransformersBackend`; prefer ``greedy=True``.
        top_p (`float`, defaults to `1.0`):
            Nucleus-sampling mass, in ``(0, 1]``; ``1.0`` disables it (ignored when ``greedy``). Top-k is always off.
        max_new_tokens (`int`, defaults to `256`):
            Generation budget per completion, in tokens.
        greedy (`bool`, defaults to `False`):
            Decode greedily (argmax) instead of sampling.
        seed (`int` or `None`, defaults to `None`):
            Seed of the draws. Backends that honour it sample under `torch.random.fork_rng`, so the caller's RNG is
            neither consumed nor perturbed; `None` draws from the global RNG.
    """

    num_samples: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    greedy: bool = False
    seed: int | None = None

    def __post_init__(self):
        def is_int(value):
            return isinstance(value, numbers.Integral) and not isinstance(value, bool)

        if not is_int(self.num_samples) or self.num_samples < 1:
            raise ValueError(f"num_samples must be a whole number of at least 1, got {self.num_samples!r}.")
        if not is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a whole number of at least 1, got {self.max_new_tokens!r}.")
        if not isinstance(self.greedy, bool):
            raise TypeError(f"greedy must be True or False, got {self.greedy!r}.")
        if not isinstance(self.temperature, numbers.Real) or isinstance(self.temperature, bool):
            raise TypeError(f"temperature must be a number, got {self.temperature!r}.")
        if not 0 <= self.temperature < float("inf"):
            raise ValueError(
                f"temperature must be a finite number of at least 0, got {self.temperature!r}. For greedy decoding "
                "set greedy=True."
            )
        if not isinstance(self.top_p, numbers.Real) or isinstance(self.top_p, bool) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1] (1.0 disables nucleus sampling), got {self.top_p!r}.")
        if self.seed is not None and not is_int(self.seed):
            raise TypeError(f"seed must be a whole number or None (unseeded), got {self.seed!r}.")

    def offset_seed(self, offset: int) -> "SamplingSettings":
        """These settings with seed ``seed + offset`` (an unseeded setting stays unseeded): the seed of batch, shard
        or rank ``offset``, so its draws do not depend on how many ran before it."""
        return self if self.seed is None else dataclasses.replace(self, seed=self.seed + offset)

    def as_greedy(self) -> "SamplingSettings":
        """One greedy completion per prompt, with the same budget."""
        return dataclasses.replace(self, num_samples=1, greedy=True)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def sampling_from_keywords(
    sampling: "SamplingSettings | None", function: Callable, arguments: dict, needs_seed: str | None = None
) -> SamplingSettings:
    """The settings of a public function that takes both loose sampling keywords and ``sampling=``.

    ``arguments`` holds the function's arguments (its ``locals()`` on entry); the `SamplingSettings` fields among its
    parameters are read from it. Without ``sampling`` they build the settings. With it, each must still have
    ``function``'s default: giving the settings both ways is an error (which one should win is a guess we refuse to
    make). With ``needs_seed`` (the reason, for the message), the settings must be seeded and not greedy.
    """
    parameters = inspect.signature(function).parameters
    keywords = {f.name: arguments[f.name] for f in dataclasses.fields(SamplingSettings) if f.name in parameters}
    if sampling is None:
        sampling = SamplingSettings(**keywords)
    else:
        _check_is_settings(sampling, function)
        if both := [name for name, value in keywords.items() if value != parameters[name].default]:
            raise ValueError(
                f"{function.__name__} got sampling=SamplingSettings(...) and also {', '.join(both)}. Give the "
                "sampling settings one way: put them in the SamplingSettings, or drop sampling= and keep the keyword "
                "arguments."
            )
    if needs_seed is not None and (sampling.seed is None or sampling.greedy):
        raise ValueError(
            f"{function.__name__} needs seeded, non-greedy sampling settings ({needs_seed}); set seed to a number and "
            "greedy=False."
        )
    return sampling


def _check_is_settings(sampling, function: Callable) -> None:
    """A `TypeError` naming ``function`` unless ``sampling`` is a `SamplingSettings`."""
    if not isinstance(sampling, SamplingSettings):
        raise TypeError(
            f"{function.__name__}: sampling must be a trl_rlvr_ext.sampling.SamplingSettings, got "
            f"{type(sampling).__name__}."
        )


class _NotGiven:
    """The default of a deprecated loose sampling keyword: "not given", told apart from every value a caller may
    give (``seed=None``, unseeded, included)."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = _NotGiven()


def sampling_from_deprecated_keywords(
    sampling: "SamplingSettings | None", function: Callable, default: SamplingSettings, keywords: dict
) -> SamplingSettings:
    """The settings of a public function whose sampling settings are one ``sampling=`` value and whose former loose
    keywords (``keywords``: name -> value, `NOT_GIVEN` where the caller did not give it) are deprecated.

    Without ``sampling``, the given keywords replace those fields of ``default`` (the function's documented settings),
    so a former call draws exactly what it drew, and one `FutureWarning` names the replacement
    (``sampling=SamplingSettings(...)``, spelled out). With ``sampling``, a given keyword is an error, as in
    `sampling_from_keywords`: which one should win is a guess we refuse to make.
    """
    given = {name: value for name, value in keywords.items() if value is not NOT_GIVEN}
    if sampling is not None:
        _check_is_settings(sampling, function)
        if given:
            raise ValueError(
                f"{function.__name__} got sampling=SamplingSettings(...) and also {', '.join(given)}. Give the "
                "sampling settings one way: put them in the SamplingSettings (the keyword arguments are deprecated)."
            )
        return sampling
    if not given:
        return default
    sampling = dataclasses.replace(default, **given)
    spelled = ", ".join(f"{name}={getattr(sampling, name)!r}" for name in keywords)
    warnings.warn(
        f"{function.__name__}: the keyword arguments {', '.join(given)} are deprecated and will be removed; pass the "
        f"sampling settings as one value, sampling=SamplingSettings(...) from trl_rlvr_ext.sampling (here: "
        f"sampling=SamplingSettings({spelled})).",
        FutureWarning,
        stacklevel=3,  # the caller of `function`, whose code is to change
    )
    return sampling


@runtime_checkable
class GenerationBackend(Protocol):
    """Anything that completes token-id prompts: `TransformersBackend`, `VLLMBackend`, `TrainerVLLMBackend`."""

    def generate(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingSettings) -> list[list[list[int]]]:
        """``sampling.num_samples`` completions (token ids, cut after the first EOS) for each prompt, in order."""
        ...


@runtime_checkable
class ScoringBackend(GenerationBackend, Protocol):
    """A `GenerationBackend` that also scores given completions (offline curation's log-likelihoods)."""

    def mean_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[float]:
        """Mean token log-likelihood of each completion given its prompt (NaN for an empty completion)."""
        ...
