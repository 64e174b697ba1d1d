"""Composition as data: which pairs of GRPO methods are refused, and why, in one table.

`RLVRGRPOConfig.__post_init__` runs each method's own `check`, then `check_composition`, which reads `REFUSED`;
`docs/reference/composition.md` is rendered from the same table (`render_composition`, checked by a test). Where each
method acts is not written here: it is read from the hooks it overrides (`GRPOMethod.acts_on`). Two active methods
that override one of the exclusive hooks (`EXCLUSIVE_HOOKS`: the sampler, the whole loss, the clipped objective) are
refused too, for a user's method as for a built-in one.
"""

from collections.abc import Callable
from dataclasses import dataclass

from .method import EXCLUSIVE_HOOKS, HOOKS, GRPOMethod, active_methods, registered_methods


_POPO_REPLACES = "POPO replaces TRL's loss (no advantages, ratio, clip or KL)"


@dataclass(frozen=True)
class Refusal:
    """Two methods that do not compose: ``why``, and ``fix`` (what to change; default: turn one of them off).

    ``when`` narrows the refusal to some of the methods' settings (e.g. only SELF among the curation modes)."""

    first: str
    second: str
    why: str
    fix: str | None = None
    when: Callable | None = None
    when_text: str = ""


REFUSED: tuple[Refusal, ...] = (
    Refusal("popo", "dynamic_sampling", "not composed with POPO yet"),
    Refusal("popo", "curation", "not composed with POPO yet"),
    Refusal("popo", "clip_objective", f"{_POPO_REPLACES}: there is no ratio to clip, rescue or diagnose"),
    Refusal("popo", "delta", f"{_POPO_REPLACES}, where DelTA weighs the advantages"),
    Refusal("popo", "rsi", f"{_POPO_REPLACES}, where RSI-S masks the policy gradient"),
    Refusal("popo", "poise", f"{_POPO_REPLACES}, where POISE's advantages act"),
    Refusal(
        "poise",
        "dynamic_sampling",
        "dynamic sampling drops zero-variance groups and regenerates, while POISE trains on every prompt (the authors' "
        "run has no filtering and no dynamic sampling) and its probe learns from every group",
    ),
    Refusal(
        "poise",
        "curation",
        "SELF drops the solved prompts' rollouts after the advantages are computed, so the trained rows and the "
        "probe's rows would differ; curation='pass_rate' (which only chooses the prompts) composes",
        when=lambda args: args.curation == "self",
        when_text="curation='self' only",
    ),
)


def _setting(cls: type[GRPOMethod], args) -> str:
    on = cls.on_switches(args)
    return ", ".join(f"{name}={value!r}" for name, value in on.items()) or cls.name


def _fix(first: type[GRPOMethod], second: type[GRPOMethod], args) -> str:
    off = lambda cls: " and ".join(f"{n}={v!r}" for n, v in cls.off_values().items() if n in cls.on_switches(args))  # noqa: E731
    return f"Set {off(second)}, or {off(first)}."


def refusal_message(refusal: Refusal, first: type[GRPOMethod], second: type[GRPOMethod], args) -> str:
    fix = refusal.fix or _fix(first, second, args)
    return f"{_setting(first, args)} cannot take {_setting(second, args)}: {refusal.why}. {fix}"


def check_composition(args) -> None:
    """Raise a ValueError naming the fix for the first refused pair of active methods in ``args``."""
    active = {cls.name: cls for cls in active_methods(args)}
    for refusal in REFUSED:
        if refusal.first in active and refusal.second in active and (refusal.when is None or refusal.when(args)):
            raise ValueError(refusal_message(refusal, active[refusal.first], active[refusal.second], args))
    for hook in EXCLUSIVE_HOOKS:
        owners = [cls for cls in active.values() if hook in cls.acts_on()]
        if len(owners) > 1:
            a, b = owners[:2]
            raise ValueError(
                f"{_setting(a, args)} cannot take {_setting(b, args)}: both replace `{hook}` ({HOOKS[hook]}), and only "
                f"one method can. {_fix(a, b, args)}"
            )


def refused_pairs() -> set[frozenset]:
    """The pairs of method names refused by the table or by an exclusive hook (whatever their settings)."""
    pairs = {frozenset((r.first, r.second)) for r in REFUSED if r.when is None}
    methods = registered_methods()
    for hook in EXCLUSIVE_HOOKS:
        owners = [cls.name for cls in methods if hook in cls.acts_on()]
        pairs |= {frozenset((a, b)) for a in owners for b in owners if a < b}
    return pairs


def render_composition() -> str:
    """The Markdown of docs/reference/composition.md, from the registry and `REFUSED`."""
    methods = [cls for cls in registered_methods() if cls.__module__.startswith("trl_rlvr_ext.")]
    lines = [
        "# Composition of the GRPO methods",
        "",
        (
            "<!-- Generated from trl_rlvr_ext/grpo/composition.py by `render_composition()`; "
            "tests/test_composition.py checks it. Do not edit by hand. -->"
        ),
        "",
        (
            "`RLVRGRPOTrainer` builds the active methods once and calls their hooks in this order (the registry's, "
            "`trl_rlvr_ext.grpo.methods.BUILTIN_METHODS`); a method registered with `register_method` comes after."
        ),
        "",
        "## Where each method acts",
        "",
        "| # | method | switched on by | acts at (hooks) | paper |",
        "|---|---|---|---|---|",
    ]
    for k, cls in enumerate(methods, start=1):
        switches = ", ".join(f"`{n}`" for n in cls.switches) or "(always on)"
        hooks = ", ".join(f"`{h}`" for h in cls.acts_on()) or "(construction only)"
        lines.append(f"| {k} | {cls.name} | {switches} | {hooks} | {cls.paper} |")
    lines += ["", "## Hooks", "", "| hook | what it does |", "|---|---|"]
    lines += [
        f"| `{hook}` | {text}{' (one method at most)' * (hook in EXCLUSIVE_HOOKS and 'one method' not in text)} |"
        for hook, text in HOOKS.items()
    ]
    by_name = {cls.name: cls for cls in methods}
    lines += ["", "## Refused pairs", "", "| first | second | when | why | fix |", "|---|---|---|---|---|"]
    for r in REFUSED:
        fix = r.fix or " or ".join(
            ", ".join(f"`{n}={v!r}`" for n, v in by_name[name].off_values().items()) for name in (r.second, r.first)
        )
        lines.append(f"| {r.first} | {r.second} | {r.when_text or 'always'} | {r.why} | {fix} |")
    names = [cls.name for cls in methods]
    refused = refused_pairs()
    conditional = {frozenset((r.first, r.second)): r.when_text for r in REFUSED if r.when is not None}
    lines += [
        "",
        "## Matrix",
        "",
        "✓ composes, ✗ refused, ◐ refused in some settings. Columns are numbered as the methods' table above.",
        "",
    ]
    # numbered columns: the names side by side would be wider than the page
    lines.append("| | " + " | ".join(str(k) for k in range(1, len(names) + 1)) + " |")
    lines.append("|---" * (len(names) + 1) + "|")
    for k, a in enumerate(names, start=1):
        cells = []
        for b in names:
            pair = frozenset((a, b))
            cells.append("·" if a == b else "✗" if pair in refused else "◐" if pair in conditional else "✓")
        lines.append(f"| **{k} {a}** | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
