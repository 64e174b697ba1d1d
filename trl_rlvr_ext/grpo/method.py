"""The protocol a GRPO method implements, and the ordered registry `RLVRGRPOTrainer` composes from.

A method is one class (one file) with its config fields, its checks and the hooks it acts on, after PEFT's
``tuners/<method>/`` and transformers' ``CallbackHandler``: composition by a declared list of objects, never by base
class order. The built-in methods (``trl_rlvr_ext/grpo/methods/``) use exactly this API; a user's method is written
the same way and registered with `register_method` (see docs/tutorials/own_method.md).

- ``Args``: a dataclass mixin holding the method's config fields (help text with the paper link and the paper's value).
  `RLVRGRPOConfig` inherits every built-in method's ``Args`` (flat fields: YAML and the command line unchanged); a
  user's fields join through `RLVRGRPOConfig.with_methods`.
- ``active(args)``: whether the method runs in this config (default: one of its ``switches`` differs from its default).
- ``check(args)``: its own ``__post_init__`` checks (run on every config that holds its fields, active or not).
- ``setup(trainer)``: called once by the trainer, after TRL's ``__init__``, in the registry's order.
- Hooks (each a no-op here; the trainer calls only the methods that override one, in the registry's order). A wrapping
  hook receives ``call``, the next method's hook (TRL's own at the end of the chain), and must call it at least once.

The pairs that are refused, and why, are data in `trl_rlvr_ext.grpo.composition`; the sites where each method acts are
read from the hooks it overrides (`acts_on`), so the table and the code cannot disagree.
"""

from collections.abc import Callable
from typing import Any, ClassVar

from .checkpoint_state import CheckpointState


# The hooks a method may override, by site: (hook name, what it does). The order is the order the trainer reaches them
# in one training step; `docs/reference/composition.md` renders it.
HOOKS: dict[str, str] = {
    "reward_funcs": "wraps the reward functions before TRL's construction (a class method: no instance exists yet)",
    "sampler": "returns the training sampler (``training=False``: a second one of its kind; one method at most)",
    "generate_and_score": "wraps TRL's generation and scoring of a generation batch (the earlier method outermost)",
    "generate_single_turn": "wraps TRL's sampling call (the earlier method outermost)",
    "rewards": "transforms the rewards TRL gathered over processes, (N, reward functions); the later method first",
    "scored_batch": "reads or edits the finished generation batch (advantages, per-token fields); the later method first",
    "new_micro_batches": "sees the micro-batches of a new generation batch",
    "micro_batch_loss": "wraps transformers' `compute_loss` of one micro-batch (the earlier method outermost)",
    "compute_loss": "replaces TRL's whole `_compute_loss` (one method at most)",
    "token_mask": "replaces TRL's entropy mask inside `_compute_loss` (which tokens get a policy gradient)",
    "log_ratio": "transforms the log importance ratio inside `_compute_loss`",
    "advantages": "transforms the advantages entering PPO's clipped objective",
    "clip_objective": "replaces PPO's clipped objective (one method at most)",
    "log_loss": "logs from the clipped objective's state",
    "optimizer": "edits the optimizer once it is built (an extra parameter group)",
    "on_train_begin": "train start",
    "on_pre_optimizer_step": "before each optimizer step",
    "on_step_end": "after each optimizer step",
    "on_train_end": "train end",
}
# The hooks that run inside the guarded copy of TRL's `_compute_loss` (trl_rlvr_ext/_trl/): with none of them active
# the trainer calls TRL's own `_compute_loss`, so it is stock TRL to the bit.
LOSS_COPY_HOOKS = ("token_mask", "log_ratio", "advantages", "clip_objective", "log_loss")
# Hooks that only one active method may override: the composition check refuses two.
EXCLUSIVE_HOOKS = ("sampler", "compute_loss", "clip_objective")


class GRPOMethod:
    """Base class of a GRPO method: every hook is a no-op (or passes through), override the ones the method acts on.

    Class attributes:
        name: the method's name in the registry, messages and the composition table.
        Args: its dataclass of config fields (None: no field).
        switches: ``{field: off value}``, the fields that turn it on; `active` is True when one of them differs
            from its off value.
        paper: the paper's link, shown in the composition table.
        metric_prefix: the namespace of its metrics (``<prefix>/<name>``); defaults to `name`.
        needs_reused_rollouts: the switches that cannot act when every generation batch is used for one optimizer
            step only (the importance ratio is then 1): the signal check warns about them at start.
    """

    name: ClassVar[str] = ""
    Args: ClassVar[type | None] = None
    switches: ClassVar[dict[str, Any]] = {}
    paper: ClassVar[str] = ""
    metric_prefix: ClassVar[str | None] = None
    needs_reused_rollouts: ClassVar[tuple[str, ...]] = ()

    # ------------------------------------------------------------------ config
    @classmethod
    def off_values(cls) -> dict[str, Any]:
        """``{switch: off value}``."""
        return dict(cls.switches)

    @classmethod
    def on_switches(cls, args) -> dict[str, Any]:
        """The switches set away from their off value in ``args`` (``{field: value}``)."""
        return {name: getattr(args, name) for name, off in cls.off_values().items() if getattr(args, name, off) != off}

    @classmethod
    def active(cls, args) -> bool:
        return bool(cls.on_switches(args))

    @classmethod
    def check(cls, args) -> None:
        """Raise a ValueError saying what to change when ``args`` holds a value the method cannot run with. May fill
        derived defaults (e.g. a seed defaulting to ``seed``)."""

    @classmethod
    def acts_on(cls) -> tuple[str, ...]:
        """The hooks this method overrides, in `HOOKS` order (the sites where it acts)."""
        own = [k for k in cls.__mro__ if issubclass(k, GRPOMethod) and k is not GRPOMethod]
        return tuple(hook for hook in HOOKS if any(hook in k.__dict__ for k in own))

    # ------------------------------------------------------------------ life cycle
    def setup(self, trainer) -> None:
        """Called once, after TRL's ``__init__``; keep what the hooks need. The default keeps the trainer and args."""
        self.trainer = trainer
        self.args = trainer.args

    def checkpoint_states(self) -> list[CheckpointState]:
        """The state to save in every checkpoint and restore on resume (`trl_rlvr_ext.grpo.checkpoint_state`)."""
        return []

    # ------------------------------------------------------------------ metrics
    def log_metric(self, name: str, value: float, mode: str | None = None, gauge: bool = False) -> None:
        """Append ``value`` to the metric ``<metric_prefix>/<name>`` (averaged over the logging window by TRL; a
        ``gauge`` keeps only the latest value). ``name`` may carry its own namespace (``"clip_ratio/x"``)."""
        trainer = self.trainer
        if mode is None:
            mode = "train" if trainer.model.training else "eval"
        key = name if "/" in name else f"{self.metric_prefix or self.name}/{name}"
        value = float(value) if not isinstance(value, float) else value
        metrics = trainer._metrics[mode]  # TRL's metric store: the mean of each list is logged at every log step
        if gauge:
            metrics[key] = [value]
        else:
            metrics[key].append(value)

    def metric_store(self, mode: str) -> dict:
        """TRL's metric store for ``mode`` (``{name: [values]}``), for a method that logs many metrics at once."""
        return self.trainer._metrics[mode]

    # ------------------------------------------------------------------ hooks (no-ops)
    @classmethod
    def reward_funcs(cls, reward_funcs: list, args) -> list:
        return reward_funcs

    def sampler(self, dataset, training: bool = True):
        return None

    def generate_and_score(self, call: Callable, inputs: list[dict]) -> dict:
        return call(inputs)

    def generate_single_turn(self, call: Callable, prompt_ids, images, multimodal_fields, num_generations, *rest):
        return call(prompt_ids, images, multimodal_fields, num_generations, *rest)

    def rewards(self, rewards_per_func, inputs: list[dict], completions: list):
        return rewards_per_func

    def scored_batch(self, output: dict) -> None:
        return None

    def new_micro_batches(self, micro_batches: list[dict]) -> None:
        return None

    def micro_batch_loss(self, call: Callable, model, inputs: dict, return_outputs, num_items_in_batch):
        return call(model, inputs, return_outputs, num_items_in_batch)

    def compute_loss(self, model, inputs: dict):
        return None

    def token_mask(self, per_token_logps, entropies, mask, entropy_mask, inputs: dict):
        return entropy_mask

    def log_ratio(self, log_ratio):
        return log_ratio

    def advantages(self, advantages, inputs: dict):
        return advantages

    def clip_objective(self, ratio, advantages, per_token_logps, mask, inputs: dict):
        return None

    def log_loss(self, mode: str, clip_state: dict, mask, global_masked_mean) -> None:
        return None

    def optimizer(self, optimizer) -> None:
        return None

    def on_train_begin(self, state) -> None:
        return None

    def on_pre_optimizer_step(self, state) -> None:
        return None

    def on_step_end(self, state) -> None:
        return None

    def on_train_end(self, state) -> None:
        return None


# ---------------------------------------------------------------------- the registry
_REGISTRY: dict[str, type[GRPOMethod]] = {}


def register_method(cls: type[GRPOMethod], before: str | None = None) -> type[GRPOMethod]:
    """Add a method to the registry `RLVRGRPOTrainer` composes from (usable as a class decorator).

    The trainer calls the active methods' hooks in registry order: the built-ins in their declared order
    (`BUILTIN_METHODS`), then the user's methods in the order they were registered; ``before="<name>"`` puts it
    before that method instead. Registering a name twice replaces the earlier class at its place (a re-imported file).
    """
    if not (isinstance(cls, type) and issubclass(cls, GRPOMethod)):
        raise TypeError(f"register_method takes a GRPOMethod subclass, got {cls!r}.")
    if not cls.name or not cls.name.isidentifier():
        raise ValueError(f"{cls.__name__}.name must be a non-empty identifier (it names metrics), got {cls.name!r}.")
    if cls.Args is not None and not hasattr(cls.Args, "__dataclass_fields__"):
        raise TypeError(f"{cls.__name__}.Args must be a dataclass (its config fields), got {cls.Args!r}.")
    if cls.name in _REGISTRY or before is None:
        _REGISTRY[cls.name] = cls
        return cls
    if before not in _REGISTRY:
        raise ValueError(f"register_method(before={before!r}): no method of that name; known: {list(_REGISTRY)}.")
    items = list(_REGISTRY.items())
    index = [name for name, _ in items].index(before)
    items.insert(index, (cls.name, cls))
    _REGISTRY.clear()
    _REGISTRY.update(items)
    return cls


def registered_methods() -> list[type[GRPOMethod]]:
    """The registered methods, in the order the trainer calls them (built-ins first)."""
    from . import methods  # noqa: F401  (registers the built-ins, in BUILTIN_METHODS order)

    return list(_REGISTRY.values())


def methods_for(args) -> list[type[GRPOMethod]]:
    """The registered methods whose fields ``args`` holds (a plain config lacks a user's fields)."""
    return [cls for cls in registered_methods() if cls.Args is None or isinstance(args, cls.Args)]


def active_methods(args) -> list[type[GRPOMethod]]:
    return [cls for cls in methods_for(args) if cls.active(args)]
