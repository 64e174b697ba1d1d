"""Guards on the TRL code we copy or override, for the installed TRL (the TRL matrix runs them on every supported one).

- Each copy in `trl_rlvr_ext/_trl/`, with our marked blocks removed, is the installed TRL's method text, character for
  character. No normalisation is needed: the copies sit at the same class-body indentation as TRL's methods, so
  `inspect.getsource` of both is compared as is.
- The blocks are the same code in every version's copy, and the re-apply tool rebuilds the committed copies.
- The signatures of every TRL / transformers method the package overrides are pinned (`EXPECTED_SIGNATURES`).
- Every private attribute the package touches and every object it patches at run time is declared
  (tests/trl_contract.py) and still there in the installed TRL; a new, undeclared private access fails the scan.
"""

import inspect
import re
from pathlib import Path

import pytest
import trl
from trl import DPOTrainer, GRPOTrainer
from trl_contract import (
    OWN_NAMES_SHARED_WITH_UPSTREAM,
    PRIVATE_ATTRIBUTES,
    PUBLIC_UNDERSCORED,
    RUNTIME_PATCHES,
    VLLM_PRIVATE_ATTRIBUTES,
    class_uses,
    load,
    module_and_class_patches,
    overrides,
    package_defined_names,
    parameters,
    private_accesses,
    upstream_private_names,
)

from trl_rlvr_ext import _trl
from trl_rlvr_ext._trl import SUPPORTED_MINORS, TRL_COPIES, copies_package, load_copy, trl_minor
from trl_rlvr_ext._trl.markers import AnchorError, count_blocks, reapply_blocks, split_blocks, strip_marked_blocks
from trl_rlvr_ext._trl.reapply import COPY_FILES, parse_copy, read_copy, reapply_file, same_code, same_methods
from trl_rlvr_ext.scripts.reapply_trl import main


COPIES_DIR = Path(_trl.__file__).parent
UPSTREAM = {"grpo": GRPOTrainer, "dpo": DPOTrainer}


def _packages(copy: str) -> list[str]:
    """The version sub-packages holding a copy of ``copy``, oldest first."""
    return sorted(set(TRL_COPIES[copy].values()), key=lambda name: tuple(map(int, name[1:].split("_"))))


VERSION_PACKAGES = sorted(
    {p for copy in UPSTREAM for p in _packages(copy)}, key=lambda n: tuple(map(int, n[1:].split("_")))
)
COPY_PACKAGES = [(copy, package) for copy in UPSTREAM for package in _packages(copy)]
# (copy, method) -> the marked blocks it must hold, per feature
EXPECTED_BLOCKS = {
    ("grpo", "_compute_loss"): {"adaptive-clip": 1, "clip-objective": 3, "rsi-selection": 1},
    ("dpo", "_compute_loss"): {"IS-DAA": 4},
}


# ---------------------------------------------------------------- the copies are TRL's text plus marked blocks
@pytest.mark.parametrize("copy, method", sorted(EXPECTED_BLOCKS), ids=lambda value: value)
def test_copy_is_installed_trl_source_plus_marked_blocks(copy, method):
    """Character for character; or, where the copy was generated from another TRL release (one copy serves every
    release whose methods differ only in comments or formatting), the same code (`same_code`: equal syntax trees)."""
    ours = inspect.getsource(getattr(load_copy(copy), method))
    assert count_blocks(ours) == EXPECTED_BLOCKS[copy, method]
    stripped, upstream = strip_marked_blocks(ours), inspect.getsource(getattr(UPSTREAM[copy], method))
    where = f"trl_rlvr_ext/_trl/{copies_package(copy)}/{copy}.py: {method}"
    if load_copy(copy).trl_version == trl.__version__:
        assert stripped == upstream, (
            f"{where} no longer mirrors TRL {trl.__version__}'s {UPSTREAM[copy].__name__}.{method}. Rebuild the copy "
            "with `python -m trl_rlvr_ext.scripts.reapply_trl` (CONTRIBUTING.md, 'Admitting a new TRL minor')."
        )
    else:
        assert stripped == upstream or same_code(stripped, upstream), (
            f"{where} (TRL {load_copy(copy).trl_version}'s text) is not the same code as TRL {trl.__version__}'s "
            f"{UPSTREAM[copy].__name__}.{method}: give TRL {trl_minor()} a copy of its own "
            "(`python -m trl_rlvr_ext.scripts.reapply_trl`) and map it in TRL_COPIES."
        )


def test_same_code_ignores_comments_and_formatting_only():
    method = "    def f(self, x):\n        # one comment\n        return x + 1\n"
    assert same_code(
        method, "    def f(self, x):\n        # another comment\n        return (x +\n                1)\n"
    )
    assert not same_code(method, "    def f(self, x):\n        return x + 2\n")
    assert not same_code(method, '    def f(self, x):\n        """A docstring is code."""\n        return x + 1\n')


def test_every_trainer_supports_the_same_minors():
    assert all(tuple(minors) == SUPPORTED_MINORS for minors in TRL_COPIES.values())


def test_copies_hold_exactly_the_expected_methods():
    for copy, package in COPY_PACKAGES:
        methods = read_copy(COPIES_DIR / package / f"{copy}.py")
        assert sorted(methods) == sorted(m for c, m in EXPECTED_BLOCKS if c == copy), package
    # no copy file that no TRL minor uses, and no two copies of one trainer that are the same code
    assert sorted((p.stem, p.parent.name) for p in COPIES_DIR.glob("v*/*.py") if p.stem != "__init__") == sorted(
        COPY_PACKAGES
    )
    for copy in UPSTREAM:
        copies = [read_copy(COPIES_DIR / package / f"{copy}.py") for package in _packages(copy)]
        stripped = [{m: strip_marked_blocks(s) for m, s in methods.items()} for methods in copies]
        for i, a in enumerate(stripped):
            assert not any(same_methods(a, b) for b in stripped[i + 1 :]), f"two {copy} copies are the same code"


def test_trainers_use_the_copies_of_the_installed_trl():
    from trl_rlvr_ext.dpo import dpo_trainer
    from trl_rlvr_ext.grpo import grpo_trainer

    assert grpo_trainer._TRL_COPY is load_copy("grpo")
    assert dpo_trainer._TRL_COPY is load_copy("dpo")
    for copy in UPSTREAM:
        assert load_copy(copy).__module__ == f"trl_rlvr_ext._trl.{TRL_COPIES[copy][trl_minor()]}.{copy}"


def _blocks(package, copy, method):
    return [block for _, block in split_blocks(read_copy(COPIES_DIR / package / f"{copy}.py")[method])[1]]


@pytest.mark.parametrize(
    "copy, method, package", [(c, m, p) for c, m in sorted(EXPECTED_BLOCKS) for p in _packages(c)]
)
def test_blocks_are_the_same_code_in_every_version(package, copy, method):
    """Our code does not fork per TRL version: only TRL's text around it does."""
    reference = _blocks(_packages(copy)[-1], copy, method)
    assert [b.lines for b in _blocks(package, copy, method)] == [b.lines for b in reference]


# ---------------------------------------------------------------- the re-apply tool
@pytest.mark.parametrize("source", VERSION_PACKAGES)
def test_reapply_rebuilds_the_committed_copies_of_the_installed_trl(source):
    """From the blocks of any version's copies, the tool rebuilds the installed TRL's committed copies: on 1.16 the
    round trip 1.16 -> 1.16 and 1.14 -> 1.16, on 1.14 the step 1.16 -> 1.14 (the whole file, when the committed copy
    was generated from this TRL release; only the methods on 1.15, whose copies are 1.16.0's)."""
    for name in COPY_FILES:
        if not (COPIES_DIR / source / name).is_file():
            continue
        copy = name.removesuffix(".py")
        text, _ = reapply_file(COPIES_DIR / source / name)
        target = COPIES_DIR / copies_package(copy)
        committed = (target / name).read_text()
        if load_copy(copy).trl_version == trl.__version__:
            assert text == committed, f"{source}/{name} re-applied on TRL {trl.__version__} != {target.name}/{name}"
        else:  # this release uses a copy generated from another (TRL 1.15 uses 1.16.0's, 1.14 1.16.0's GRPO copy)
            assert same_methods(parse_copy(text), read_copy(target / name)), (
                f"{source}/{name} re-applied on TRL {trl.__version__} is not the code of {target.name}/{name}"
            )


def test_reapply_cli_writes_a_version_package(tmp_path, capsys):
    assert main(["--source", VERSION_PACKAGES[-1], "--target", "v9_9", "--output-dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "v9_9").iterdir()) == ["__init__.py", *sorted(COPY_FILES)]
    for name in COPY_FILES:
        methods = read_copy(tmp_path / "v9_9" / name)
        for method, source in methods.items():
            assert strip_marked_blocks(source) == inspect.getsource(
                getattr(UPSTREAM[name.removesuffix(".py")], method)
            )
    out = capsys.readouterr().out
    assert "Next: map" in out
    # the new release's copies are the code of the committed ones: the tool says to map the minor there instead
    assert f"same code: grpo.py differs from {copies_package('grpo')}/grpo.py only in comments or formatting" in out
    # --check on an up-to-date package: nothing would change
    assert main(["--source", VERSION_PACKAGES[-1], "--target", "v9_9", "--output-dir", str(tmp_path), "--check"]) == 0
    (tmp_path / "v9_9" / "grpo.py").write_text("stale\n")
    assert main(["--source", VERSION_PACKAGES[-1], "--target", "v9_9", "--output-dir", str(tmp_path), "--check"]) == 1


_OURS = """\
    def f(self, x):
        a = 1
        # --- feat begin
        a = self.ours(a)
        # --- feat end
        b = 2
        return a + b
"""


def test_strip_and_count_blocks():
    assert strip_marked_blocks(_OURS) == "    def f(self, x):\n        a = 1\n        b = 2\n        return a + b\n"
    assert count_blocks(_OURS) == {"feat": 1}


def test_reapply_places_blocks_by_their_anchor_lines():
    new_upstream = "    def f(self, x):\n        y = 0\n        a = 1\n        b = 2\n        return a + b\n"
    new, notes = reapply_blocks(_OURS, new_upstream)
    assert new == (
        "    def f(self, x):\n        y = 0\n        a = 1\n        # --- feat begin\n        a = self.ours(a)\n"
        "        # --- feat end\n        b = 2\n        return a + b\n"
    )
    assert notes == []
    # the line after the anchor changed: placed after the anchor, and reported for review
    new, notes = reapply_blocks(_OURS, "    def f(self, x):\n        a = 1\n        c = 3\n        return a\n")
    assert new.splitlines()[2:5] == ["        # --- feat begin", "        a = self.ours(a)", "        # --- feat end"]
    assert len(notes) == 1 and "'c = 3'" in notes[0]


@pytest.mark.parametrize(
    "new_upstream",
    [
        "    def f(self, x):\n        a = 2\n        return a\n",  # anchor and next line both gone
        "    def f(self, x):\n        a = 1\n        a = 1\n        return a\n",  # anchor ambiguous, next line gone
    ],
    ids=["missing", "ambiguous"],
)
def test_reapply_fails_loudly_without_a_unique_anchor(new_upstream):
    with pytest.raises(AnchorError, match=r"block 1 \(feat\) of the method: cannot place it.*'a = 1'"):
        reapply_blocks(_OURS, new_upstream)


@pytest.mark.parametrize(
    "source, message",
    [
        ("    def f(self):\n        # --- a begin\n        x = 1\n", "not closed"),
        ("    def f(self):\n        x = 1\n        # --- a end\n", "without a matching begin"),
        ("    def f(self):\n        # --- a begin\n        # --- b begin\n", "opens inside block 'a'"),
        ("        # --- a begin\n        # --- a end\n    def f(self):\n", "before the method's first line"),
    ],
)
def test_bad_markers_are_named(source, message):
    with pytest.raises(ValueError, match=message):
        split_blocks(source)


# ---------------------------------------------------------------- supported TRL versions
@pytest.mark.parametrize(
    "version, grpo, dpo",
    [
        ("1.14.0", "v1_16", "v1_14"),
        ("1.14.2", "v1_16", "v1_14"),
        ("1.15.0", "v1_16", "v1_16"),
        ("1.16.0", "v1_16", "v1_16"),
    ],
)
def test_each_supported_trl_minor_has_copies(version, grpo, dpo):
    assert (copies_package("grpo", version), copies_package("dpo", version)) == (grpo, dpo)
    assert (COPIES_DIR / grpo / "grpo.py").is_file() and (COPIES_DIR / dpo / "dpo.py").is_file()


@pytest.mark.parametrize("version", ["1.13.2", "1.17.0", "2.0.0"])
def test_unsupported_trl_version_is_a_clear_error(version):
    with pytest.raises(ImportError, match=rf"supports TRL 1\.14, 1\.15, 1\.16, but TRL {version} is installed"):
        load_copy("grpo", version)


def test_pyproject_pin_matches_the_supported_versions():
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    minors = sorted(SUPPORTED_MINORS, key=lambda v: tuple(map(int, v.split("."))))
    major, last = minors[-1].split(".")
    assert f'"trl>={minors[0]},<{major}.{int(last) + 1}"' in text


# ---------------------------------------------------------------- the signatures of what we override
# Parameters (names, kinds, defaults; annotations dropped) of the TRL / transformers method each of our methods
# overrides. The same on TRL 1.14.2, 1.15.0 and 1.16.0. A change here means a TRL / transformers upgrade changed a
# method we hook into: read the new TRL code before updating the expectation.
_TRAINER_ARGS = "train_dataset=None, eval_dataset=None, processing_class=None"
_CALLBACK = "(self, args, state, control, **kwargs)"
EXPECTED_SIGNATURES = {
    "trl_rlvr_ext.dpo.dpo_config.ISDPOConfig.__post_init__": "(self)",
    "trl_rlvr_ext.dpo.dpo_trainer.ISDPOTrainer.__init__": (
        f"(self, model, ref_model=None, args=None, data_collator=None, {_TRAINER_ARGS}, compute_metrics=None, "
        "callbacks=None, optimizers=(None, None), quantization_config=None, peft_config=None)"
    ),
    "trl_rlvr_ext.dpo.dpo_trainer.ISDPOTrainer._compute_loss": "(self, model, inputs, return_outputs)",
    "trl_rlvr_ext.dpo.dpo_trainer.ISDPOTrainer._prepare_dataset": "(self, dataset, processing_class, args, dataset_name)",
    "trl_rlvr_ext.dpo.dpo_trainer.ISDPOTrainer._set_signature_columns_if_needed": "(self)",
    "trl_rlvr_ext.dpo.dpo_trainer.ISDPOTrainer.compute_ref_log_probs": "(self, model, inputs)",
    "trl_rlvr_ext.curation.greedy.GreedyRows.__call__": "(self, input_ids, scores)",
    "trl_rlvr_ext.evaluation.boundary.BoundaryProbeCallback.on_step_end": _CALLBACK,
    "trl_rlvr_ext.evaluation.boundary.BoundaryProbeCallback.on_train_begin": _CALLBACK,
    "trl_rlvr_ext.evaluation.callback.PassAtKCallback.on_step_end": _CALLBACK,
    "trl_rlvr_ext.evaluation.callback.PassAtKCallback.on_train_begin": _CALLBACK,
    "trl_rlvr_ext.extrapolation.callback.RELEXTrajectoryCallback.on_save": _CALLBACK,
    "trl_rlvr_ext.extrapolation.callback.RELEXTrajectoryCallback.on_step_begin": _CALLBACK,
    "trl_rlvr_ext.extrapolation.callback.RELEXTrajectoryCallback.on_step_end": _CALLBACK,
    "trl_rlvr_ext.extrapolation.callback.RELEXTrajectoryCallback.on_train_begin": _CALLBACK,
    "trl_rlvr_ext.extrapolation.callback.RELEXTrajectoryCallback.on_train_end": _CALLBACK,
    "trl_rlvr_ext.grpo.checkpoint_state.CheckpointStateMixin._load_optimizer_and_scheduler": "(self, checkpoint)",
    "trl_rlvr_ext.grpo.checkpoint_state.CheckpointStateMixin._save_checkpoint": "(self, model, trial)",
    "trl_rlvr_ext.grpo.grpo_config.RLVRGRPOConfig.__post_init__": "(self)",
    "trl_rlvr_ext.lora_init.saving.CheckpointAdapterMixin._load_from_checkpoint": (
        "(self, resume_from_checkpoint, model=None)"
    ),
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer.__init__": (
        f"(self, model, reward_funcs=None, args=None, {_TRAINER_ARGS}, reward_processing_classes=None, callbacks=None, "
        "optimizers=(None, None), quantization_config=None, peft_config=None, tools=None, rollout_func=None, "
        "environment_factory=None)"
    ),
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer._compute_loss": "(self, model, inputs)",
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer._generate_and_score_completions": "(self, inputs)",
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer._calculate_rewards": (
        "(self, inputs, prompts, completions, completion_ids_list)"
    ),
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer._generate_single_turn": (
        "(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False)"
    ),
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer._get_train_sampler": "(self, dataset=None)",
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer._prepare_inputs": "(self, generation_batch)",
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer.compute_loss": (
        "(self, model, inputs, return_outputs=False, num_items_in_batch=None)"
    ),
    "trl_rlvr_ext.grpo.grpo_trainer.RLVRGRPOTrainer.create_optimizer": "(self, model=None)",
    "trl_rlvr_ext.grpo.grpo_trainer._MethodsCallback.on_pre_optimizer_step": _CALLBACK,
    "trl_rlvr_ext.grpo.grpo_trainer._MethodsCallback.on_step_end": _CALLBACK,
    "trl_rlvr_ext.grpo.grpo_trainer._MethodsCallback.on_train_begin": _CALLBACK,
    "trl_rlvr_ext.grpo.grpo_trainer._MethodsCallback.on_train_end": _CALLBACK,
    "trl_rlvr_ext.lora_init.saving.LoraInitCallback.on_save": _CALLBACK,
    "trl_rlvr_ext.scripts.console.ConciseProgressCallback.__init__": "(self, max_str_len=100)",
    "trl_rlvr_ext.scripts.console._ConciseLog.on_log": _CALLBACK,
    "trl_rlvr_ext.lora_init.saving.LoraInitCallback.on_train_end": _CALLBACK,
    "trl_rlvr_ext.lora_init.saving.LoraInitCallback.on_train_begin": _CALLBACK,
}


def test_every_override_is_pinned():
    """A new override of a TRL / transformers method must be added to EXPECTED_SIGNATURES (and so be reviewed)."""
    assert sorted(overrides()) == sorted(EXPECTED_SIGNATURES)


@pytest.mark.parametrize("name", sorted(EXPECTED_SIGNATURES))
def test_overridden_upstream_signature(name):
    _, upstream = overrides()[name]
    assert parameters(upstream) == EXPECTED_SIGNATURES[name], (
        f"The installed TRL / transformers changed the signature of the method {name} overrides "
        f"({upstream.__qualname__}): read the new code, adapt the override, then update EXPECTED_SIGNATURES."
    )


def _call_problems(ours, upstream) -> list[str]:
    """How calls that fit ``upstream``'s signature would fail on ``ours`` (empty when every such call fits)."""
    mine = inspect.signature(ours).parameters
    theirs = inspect.signature(upstream).parameters
    positional_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    my_positional = [p for p in mine.values() if p.kind in positional_kinds]
    var_positional = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in mine.values())
    var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in mine.values())
    problems = []
    for index, parameter in enumerate(p for p in theirs.values() if p.kind in positional_kinds):
        if index < len(my_positional):
            if (my_positional[index].name, my_positional[index].default) != (parameter.name, parameter.default):
                problems.append(f"position {index}: {my_positional[index]} instead of {parameter}")
        elif not (var_positional or var_keyword):
            problems.append(f"{parameter.name} is not accepted")
    for parameter in (p for p in theirs.values() if p.kind is inspect.Parameter.KEYWORD_ONLY):
        if parameter.name not in mine and not var_keyword:
            problems.append(f"keyword {parameter.name} is not accepted")
    return problems


@pytest.mark.parametrize("name", sorted(EXPECTED_SIGNATURES))
def test_overrides_accept_the_calls_trl_makes(name):
    """Our override takes TRL's parameters in TRL's order (the rest through *args / **kwargs)."""
    ours, upstream = overrides()[name]
    assert _call_problems(ours, upstream) == []


# ---------------------------------------------------------------- private attributes and runtime patches
@pytest.mark.parametrize("name", sorted(PRIVATE_ATTRIBUTES))
def test_declared_private_attribute_still_exists(name):
    owners, use = PRIVATE_ATTRIBUTES[name]
    for owner in owners:
        assert class_uses(load(owner), name), (
            f"{owner} no longer has {name} (the package uses it: {use}). The installed TRL / library changed an internal "
            "the package relies on: read its new code, adapt the package, then update PRIVATE_ATTRIBUTES "
            "(tests/trl_contract.py)."
        )


def test_every_private_access_of_the_package_is_declared():
    """A ``x._name`` (or ``getattr(x, "_name")``) anywhere in the package (wherever its modules move) touches either a
    name the package defines for itself or a declared contact: a new contact with TRL's internals fails here."""
    overridden = {key.rsplit(".", 1)[1] for key in EXPECTED_SIGNATURES}
    own = package_defined_names(COPIES_DIR.parent) - upstream_private_names()
    allowed = (
        own
        | overridden
        | set(PRIVATE_ATTRIBUTES)
        | set(VLLM_PRIVATE_ATTRIBUTES)
        | set(PUBLIC_UNDERSCORED)
        | set(OWN_NAMES_SHARED_WITH_UPSTREAM)
    )
    undeclared = {
        name: where[:3] for name, where in private_accesses(COPIES_DIR.parent).items() if name not in allowed
    }
    assert not undeclared, (
        f"Private attributes of other libraries' objects the package touches without declaring them: {undeclared}. "
        "Use a public API, or declare each in PRIVATE_ATTRIBUTES (tests/trl_contract.py) with its owner class (or, for "
        "a name of the package's own that TRL also uses, in OWN_NAMES_SHARED_WITH_UPSTREAM)."
    )


def test_declared_names_are_still_used_by_the_package():
    """No stale declaration: each declared name is still touched somewhere in the package."""
    used = set(private_accesses(COPIES_DIR.parent))
    stale = sorted(set(PRIVATE_ATTRIBUTES) - used) + sorted(set(OWN_NAMES_SHARED_WITH_UPSTREAM) - used)
    assert not stale, f"Declared in tests/trl_contract.py but no longer used by the package: {stale}"


def test_every_patch_of_an_imported_trl_object_is_declared():
    """An assignment to an attribute of a TRL / transformers / vLLM module or class the file imports is a runtime
    patch: each must be in RUNTIME_PATCHES (patches of instances are declared there by hand)."""
    declared = {(target, attribute) for target, attribute, *_ in RUNTIME_PATCHES}
    found = module_and_class_patches(COPIES_DIR.parent)
    assert {(target, attribute) for target, attribute, _ in found} & declared, "the scan finds no declared patch"
    undeclared = [
        f"{where}: {target}.{attribute}" for target, attribute, where in found if (target, attribute) not in declared
    ]
    assert not undeclared, (
        f"Runtime patches of TRL objects not declared in RUNTIME_PATCHES (tests/trl_contract.py): {undeclared}"
    )


@pytest.mark.parametrize("target, attribute, kind, caller, call", RUNTIME_PATCHES, ids=lambda v: str(v)[:40])
def test_patched_object_still_has_the_attribute_and_trl_still_calls_it(target, attribute, kind, caller, call):
    """Each runtime patch replaces something TRL still has, and TRL still reaches it where the patch expects."""
    obj = load(target)
    if inspect.ismodule(obj):  # a module attribute may be bound only with the optional dependency (vLLM): its import
        assert re.search(rf"\bimport\b[^\n]*\b{attribute}\b", inspect.getsource(obj)), (target, attribute)
    else:
        assert class_uses(obj, attribute), f"{target} has no {attribute} any more ({kind})"
    assert call in inspect.getsource(load(caller)), (
        f"{caller} no longer calls {call!r}: the patch of {target}.{attribute} ({kind}) would not take effect. Read the "
        "new TRL code and adapt the patch, then RUNTIME_PATCHES (tests/trl_contract.py)."
    )


def test_curation_patches_the_generate_trl_calls():
    """Curation's `generate_single_turn` hook adds a logits processor by patching `generate` on the unwrapped model,
    which TRL's transformers generation path must therefore call."""
    assert inspect.getsource(GRPOTrainer._generate_single_turn).count("unwrapped_model.generate(") == 1
