"""Composition as data: the table of refused pairs, the page rendered from it, every allowed pair trained one step on
the toy, every refused pair's message naming the fix; and the extension API a user's method goes through."""

import itertools
from pathlib import Path

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures
from grpo_helpers import digit_reward, prompt_dataset, small_grpo_kwargs

from trl_rlvr_ext import GRPOMethod, RLVRGRPOConfig, RLVRGRPOTrainer, register_method
from trl_rlvr_ext.grpo.composition import REFUSED, check_composition, refused_pairs, render_composition
from trl_rlvr_ext.grpo.method import LOSS_COPY_HOOKS, active_methods, registered_methods


PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "composition.md"

# One setting that turns each switchable built-in method on, valid on its own with `small_grpo_kwargs`
ON = {
    "clip_objective": {"clip_recovery": "nsr", "steps_per_generation": 2},
    "delta": {"token_credit": "delta"},
    "rsi": {"rsi_selection": "interval", "rsi_low": 0.0},
    "curation": {"curation": "pass_rate", "remove_unused_columns": False},
    "dynamic_sampling": {"dynamic_sampling": True},
    "popo": {"objective": "popo", "popo_predictor_hidden_dim": 8},
    "poise": {
        "value_baseline": "poise",
        "scale_rewards": "none",
        "poise_prompt_pca": 2,
        "poise_response_pca": 2,
        "poise_pool_n": 2,
        "poise_bootstrap_steps": 1,
        "poise_warmup_steps": 1,
    },
    "relex": {"relex_record_steps": 1},
}


def _config(tmp_path, *names, **extra):
    kwargs = small_grpo_kwargs(tmp_path, max_steps=1, per_device_train_batch_size=4)
    for name in names:
        kwargs.update(ON[name])
    return RLVRGRPOConfig(**{**kwargs, **extra})


def test_composition_page_is_the_render():
    assert PAGE.read_text() == render_composition(), "regenerate: python -c 'from trl_rlvr_ext.grpo.composition ...'"


def test_every_switchable_builtin_has_a_setting_here():
    switchable = {cls.name for cls in registered_methods() if cls.switches and cls.name != "signal_check"}
    assert switchable <= set(ON) | {"advantage_clip"}


def test_the_loss_copy_runs_only_for_loss_hooks():
    """The five-flag gate of old is derived: the copy of TRL's `_compute_loss` runs iff an active method overrides
    one of the loss-copy hooks (NSR/ACPO/diagnostics, DelTA, RSI-S among the built-ins)."""
    at_loss = {cls.name for cls in registered_methods() if set(cls.acts_on()) & set(LOSS_COPY_HOOKS)}
    assert {"clip_objective", "delta", "rsi"} <= at_loss
    assert not at_loss & {"curation", "dynamic_sampling", "relex", "reward_guard"}


@pytest.mark.parametrize("refusal", REFUSED, ids=lambda r: f"{r.first}-{r.second}")
def test_every_refused_pair_names_the_fix(tmp_path, refusal):
    extra = {"curation": "self"} if refusal.second == "curation" else {}
    with pytest.raises(ValueError) as error:
        _config(tmp_path, refusal.first, refusal.second, **extra)
    message = str(error.value)
    first, second = (next(c for c in registered_methods() if c.name == n) for n in (refusal.first, refusal.second))
    assert refusal.why in message
    # the fix: the off value of each side's switch, spelled as a config field
    for cls in (first, second):
        switch, off = next(iter(cls.off_values().items()))
        assert f"{switch}={off!r}" in message, message


def test_a_conditional_refusal_lets_the_other_settings_through(tmp_path):
    args = _config(tmp_path, "poise", "curation")  # pass_rate composes with POISE; SELF does not
    check_composition(args)


ALLOWED = [
    pair for pair in itertools.combinations(ON, 2) if frozenset(pair) not in refused_pairs() and pair[0] != pair[1]
]


@pytest.mark.parametrize("pair", ALLOWED, ids="+".join)
def test_every_allowed_pair_trains_one_step(tiny_model_path, tmp_path, pair):
    """One optimizer step on the tiny model for each pair the table allows (21 pairs, about 1 s each on a CPU)."""
    args = _config(tmp_path, *pair)
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset(8)
    )
    assert {m.name for m in trainer.methods} >= set(pair)
    trainer.train()
    assert trainer.state.global_step == 1 and "train_loss" in trainer.state.log_history[-1]


def test_a_user_method_is_refused_with_a_builtin_that_replaces_the_same_hook(tmp_path):
    class MyObjective(GRPOMethod):
        name = "my_objective_test"
        switches = {"clip_recovery": "none"}  # noqa: RUF012  (rides on a built-in field, for the test only)

        def clip_objective(self, ratio, advantages, per_token_logps, mask, inputs):
            return None

    register_method(MyObjective)
    try:
        with pytest.raises(ValueError, match=r"both replace `clip_objective`.*Set clip_recovery='none'"):
            _config(tmp_path, "clip_objective")
    finally:
        from trl_rlvr_ext.grpo import method

        method._REGISTRY.pop("my_objective_test")


@pytest.mark.usefixtures("docs_env")
def test_own_method_tutorial_runs(tmp_path):
    namespace = run_docs_page("tutorials/own_method.md", tmp_path)
    trainer = namespace["trainer"]
    assert [m.name for m in trainer.methods] == ["signal_check", "clip_objective", "reward_guard", "advantage_clip"]
    logs = trainer.state.log_history
    assert any("advantage_clip/clipped_frac" in log for log in logs)
    assert any("clip_recovery/high_frac" in log for log in logs)
    assert (tmp_path / "own-method" / "checkpoint-2" / "advantage_clip_state.json").is_file()
    # the state comes back on resume, through the trainer's checkpoint mechanism
    method = trainer.method("advantage_clip")
    saved = method.clipped_total
    method.clipped_total = -1
    trainer._load_optimizer_and_scheduler(str(tmp_path / "own-method" / "checkpoint-2"))
    assert method.clipped_total == saved
    # the method, written in a folder outside the repository, passed the kit (each check raises otherwise)
    assert {p.name for p in (tmp_path / "kit").iterdir()} >= {"stock", "resume", "sharded"}


def test_the_registry_is_the_declared_order_and_a_user_method_comes_after():
    from trl_rlvr_ext.grpo import method
    from trl_rlvr_ext.grpo.methods import BUILTIN_METHODS

    names = [cls.name for cls in registered_methods()]
    assert names[: len(BUILTIN_METHODS)] == [cls.name for cls in BUILTIN_METHODS]

    class Early(GRPOMethod):
        name = "early_test"

    class Late(GRPOMethod):
        name = "late_test"

    register_method(Late)
    register_method(Early, before="delta")
    try:
        names = [cls.name for cls in registered_methods()]
        assert names.index("early_test") == names.index("delta") - 1 and names[-1] == "late_test"
        with pytest.raises(ValueError, match="no method of that name"):
            register_method(type("Other", (GRPOMethod,), {"name": "other_test"}), before="nope")
        with pytest.raises(TypeError, match="GRPOMethod subclass"):
            register_method(object)
    finally:
        for name in ("early_test", "late_test"):
            method._REGISTRY.pop(name)


def test_a_users_config_fields_are_flat_checked_and_pickle(tmp_path):
    import dataclasses
    import pickle

    @dataclasses.dataclass
    class ScaleArgs:
        scale_test: float = dataclasses.field(default=1.0, metadata={"help": "a factor"})

    class Scale(GRPOMethod):
        name = "scale_test"
        Args = ScaleArgs
        switches = {"scale_test": 1.0}  # noqa: RUF012

        @classmethod
        def check(cls, args):
            if not args.scale_test > 0:
                raise ValueError("scale_test must be > 0")

        def advantages(self, advantages, inputs):
            return advantages * self.args.scale_test

    Config = RLVRGRPOConfig.with_methods(Scale)
    assert Config is RLVRGRPOConfig.with_methods(Scale)  # built once: pickling finds it by name
    assert Scale.acts_on() == ("advantages",)
    register_method(Scale)
    try:
        args = Config(**small_grpo_kwargs(tmp_path), scale_test=0.5)
        assert [cls.name for cls in active_methods(args)] == ["signal_check", "reward_guard", "scale_test"]
        assert pickle.loads(pickle.dumps(args)).scale_test == 0.5
        with pytest.raises(ValueError, match="scale_test must be > 0"):
            Config(**small_grpo_kwargs(tmp_path), scale_test=0.0)
        assert "scale_test" not in {f.name for f in dataclasses.fields(RLVRGRPOConfig)}
    finally:
        from trl_rlvr_ext.grpo import method

        method._REGISTRY.pop("scale_test")
