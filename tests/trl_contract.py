"""The package's contact with TRL's (and its dependencies') internals, shared by the tests: the TRL / transformers
methods it overrides (found by walking its classes; tests/test_trl_copies.py pins their signatures), the private
attributes it touches and the objects it patches at run time (declared below)."""

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
from pathlib import Path

import trl_rlvr_ext
from trl_rlvr_ext.sampling.backends import TrainerVLLMBackend


UPSTREAM_PREFIXES = ("trl.", "transformers.")


def _ours(obj) -> bool:
    return obj.__module__.startswith("trl_rlvr_ext")


def _is_written_here(function) -> bool:
    """Skip the methods `dataclasses` generates (`__init__`, `__repr__`, `__eq__` of the configs): nobody wrote them."""
    function = inspect.unwrap(getattr(function, "__func__", function))
    code = getattr(function, "__code__", None)
    return code is not None and code.co_filename != "<string>"


def package_classes() -> dict[str, type]:
    """Every class of the package (the version sub-packages of `_trl` excepted) with a TRL / transformers base."""
    classes = {}
    for info in pkgutil.walk_packages(trl_rlvr_ext.__path__, "trl_rlvr_ext."):
        if info.name.startswith("trl_rlvr_ext._trl.v"):  # copies of other TRL versions may not import here
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if _ours(cls) and any(base.__module__.startswith(UPSTREAM_PREFIXES) for base in cls.__mro__):
                classes[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return classes


def overrides() -> dict[str, tuple[object, object]]:
    """``{"<our class>.<method>": (our function, the upstream function it overrides)}``."""
    found = {}
    for cls in package_classes().values():
        for ours in (klass for klass in cls.__mro__ if _ours(klass)):
            for method, function in ours.__dict__.items():
                if not callable(getattr(function, "__func__", function)) or not _is_written_here(function):
                    continue
                upstream = next(
                    (k for k in cls.__mro__ if k.__module__.startswith(UPSTREAM_PREFIXES) and method in k.__dict__),
                    None,
                )
                if upstream is not None:
                    key = f"{ours.__module__}.{ours.__qualname__}.{method}"
                    found.setdefault(key, (function, upstream.__dict__[method]))
    return found


def parameters(function) -> str:
    """The signature without annotations: names, kinds and defaults (annotations name types by module paths that
    move between releases without changing the call contract)."""
    signature = inspect.signature(getattr(function, "__func__", function))
    return str(
        signature.replace(
            parameters=[p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()],
            return_annotation=inspect.Signature.empty,
        )
    )


# ---------------------------------------------------------------- the contact besides the overridden methods
# Every private attribute of a TRL (or transformers, accelerate, datasets, argparse) object the package reads, writes
# or calls, and every object of theirs it patches at run time, declared here beside the overridden methods (whose
# signatures tests/test_trl_copies.py pins). tests/test_trl_copies.py checks each entry against the installed
# libraries (the TRL matrix runs it on every supported TRL) and scans the package for undeclared private accesses.
# name -> (the classes that own it, "module:Class"; what the package does with it)
PRIVATE_ATTRIBUTES = {
    "_metrics": (
        ("trl:GRPOTrainer", "trl:DPOTrainer"),
        "appends each method's namespaced metrics; callbacks read them",
    ),
    "_logs": (("trl:GRPOTrainer",), "POISE writes its advantages over TRL's in the completions table's log"),
    "_step": (("trl:GRPOTrainer",), "the off-policy diagnostics read the micro-step count (update index in a cycle)"),
    "_buffered_inputs": (("trl:GRPOTrainer",), "curation reads the generation batches TRL buffers for reuse"),
    "_tokenizer": (("trl:GRPOTrainer",), "dynamic sampling pads merged groups with its pad token"),
    "_tokenize_prompts": (("trl:GRPOTrainer",), "curation tokenises prompts as TRL does (called)"),
    "_get_per_token_logps_and_entropies": (("trl:GRPOTrainer",), "DelTA's and POPO's extra forward passes (called)"),
    "_last_loaded_step": (("trl:GRPOTrainer",), "the evaluation backend syncs vLLM weights when TRL has not"),
    "_get_output_dir": (("transformers:Trainer",), "where a checkpoint goes, for the methods' state files (called)"),
    "_signature_columns": (("transformers:Trainer",), "IS-DPO keeps its behaviour log-prob columns"),
    "_iter_named_params": (
        ("trl.generation.vllm_generation:VLLMGeneration",),
        "the CPU weight sync sends the tensors TRL would (called)",
    ),
    "_fix_param_name_to_vllm": (
        ("trl.generation.vllm_generation:VLLMGeneration",),
        "the adapter sync names the base tensors as TRL's sync does (called)",
    ),
    "_llm_weights_sleeping": (
        ("trl.generation.vllm_generation:VLLMGeneration",),
        "the CPU weight sync marks the weights awake, as TRL's sync does",
    ),
    "_name_or_path": (("transformers:PretrainedConfig",), "a reward model's name in the grading logs"),
    "_tied_weights_keys": (("transformers:PreTrainedModel",), "the converted pretrained models keep their tied head"),
    "_reset_state": (("accelerate.state:AcceleratorState",), "the distributed checks start each run clean (called)"),
    "_fingerprint": (("datasets:Dataset",), "offline curation keys its shards by the dataset's fingerprint"),
    "_actions": (("argparse:ArgumentParser",), "the command lines name an unknown option's closest match"),
}
# The same for vLLM's internals (vLLM is not installed beside the package: tests/vllm_cpu/run_colocate.py checks these
# in the vLLM venv, and tests/test_vllm_cpu.py asserts on its answer)
VLLM_PRIVATE_ATTRIBUTES = {
    "_adapter_manager": (
        ("vllm.lora.worker_manager:WorkerLoRAManager",),
        "the colocated adapter sync adds the adapter it built in memory (grpo/vllm_lora.py)",
    ),
}
# Names with a leading underscore that are public API (documented) where the package uses them
PUBLIC_UNDERSCORED = {"_exit": "os._exit"}
# Private names the package defines for itself that some TRL / transformers class also uses (not a contact)
OWN_NAMES_SHARED_WITH_UPSTREAM = {
    "_generate": "ServerGuard (grpo/vllm_state.py) keeps the VLLMGeneration.generate it wraps",
    "_stop": "ServerGuard's own stop flag",
    "_target": "RELEX's trajectory recorder's own target",
}
# Objects of TRL / transformers the package replaces at run time (and restores), with what TRL must still do for the
# replacement to take effect: (object "module:qualname", attribute, kind, where TRL calls it, the call's text)
RUNTIME_PATCHES = [
    (
        "trl.generation.vllm_generation",
        "LLM",
        "module attribute, while a trainer is built (vllm_engine_kwargs)",
        "trl.generation.vllm_generation:VLLMGeneration",
        "LLM(",
    ),
    (
        "trl.generation.vllm_client:VLLMClient",
        "init_communicator",
        "class attribute, while a trainer is built (server mode on CPU: no NCCL group)",
        "trl.generation.vllm_generation:VLLMGeneration",
        ".init_communicator(",
    ),
    (
        "trl.generation.vllm_generation:VLLMGeneration",
        "sync_weights",
        "instance attribute of trainer.vllm_generation (the CPU weight sync)",
        "trl:GRPOTrainer",
        "self.vllm_generation.sync_weights()",
    ),
    (
        "trl.generation.vllm_generation:VLLMGeneration",
        "generate",
        "instance attribute of trainer.vllm_generation (the server guard: seeded requests, a dead server)",
        "trl:GRPOTrainer",
        "self.vllm_generation.generate(",
    ),
    (
        "trl.generation.vllm_client:VLLMClient",
        "generate",
        "instance attribute of the vLLM client (the server guard)",
        "trl.generation.vllm_generation:VLLMGeneration",
        "self.vllm_client.generate(",
    ),
    (
        "transformers:GenerationMixin",
        "generate",
        "instance attribute of the unwrapped model, during one generation (SELF's fused greedy rows)",
        "trl:GRPOTrainer",
        "unwrapped_model.generate(",
    ),
    *(
        (
            "trl.generation.vllm_generation:VLLMGeneration",
            name,
            "instance attribute of trainer.vllm_generation, around one call (the evaluation backend's sampling)",
            "trl.generation.vllm_generation:VLLMGeneration",
            f"self.{name}",
        )
        for name in TrainerVLLMBackend._SAMPLING_ATTRIBUTES
    ),
]


def load(path: str):
    """The object at ``"module:qualname"`` (or the module ``"module"``)."""
    module, _, name = path.partition(":")
    obj = importlib.import_module(module)
    for part in filter(None, name.split(".")):
        obj = getattr(obj, part)
    return obj


def class_uses(cls: type, name: str) -> bool:
    """Whether ``cls`` has ``name`` (a method or class attribute) or assigns ``self.<name>`` in a class of its MRO."""
    if hasattr(cls, name):
        return True
    pattern = re.compile(rf"\bself\.{name}\s*(:[^=\n]*)?=(?!=)")
    for klass in cls.__mro__:
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if pattern.search(source):
            return True
    return False


def private_accesses(package_dir) -> dict[str, list[str]]:
    """``{name: ["file:line", ...]}`` of every access to a private attribute (``x._name``, and ``getattr`` / ``setattr`` /
    ``hasattr`` / ``delattr`` with a constant ``"_name"``) in the package, the guarded TRL copies excepted."""
    found = {}
    for path in sorted(Path(package_dir).rglob("*.py")):
        parts = path.relative_to(package_dir).parts
        if parts[0] == "_trl" and len(parts) > 2 and parts[1].startswith("v"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = None
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name = node.args[1].value
            if name and name.startswith("_") and not name.startswith("__"):
                found.setdefault(name, []).append(f"{path.relative_to(Path(package_dir).parent)}:{node.lineno}")
    return found


def package_defined_names(package_dir) -> set[str]:
    """The names the package defines: functions, classes, and every attribute or name it assigns."""
    names = set()
    for path in sorted(Path(package_dir).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for part in ast.walk(target):
                        if isinstance(part, ast.Attribute):
                            names.add(part.attr)
                        elif isinstance(part, ast.Name):
                            names.add(part.id)
    return names


# The sources whose private names the package may touch: TRL whole, the parts of its libraries it builds on
UPSTREAM_SOURCES = {
    "trl": ("**/*.py",),
    "transformers": ("trainer*.py", "modeling_utils.py", "configuration_utils.py", "generation/utils.py"),
    "accelerate": ("state.py", "accelerator.py"),
    "datasets": ("arrow_dataset.py",),
}


def upstream_private_names() -> set[str]:
    """Every ``self._name`` / ``def _name`` / ``cls._name`` in `UPSTREAM_SOURCES`: a name of the package that is also
    one of theirs may be a contact."""
    names = set()
    for package, patterns in UPSTREAM_SOURCES.items():
        root = Path(importlib.util.find_spec(package).origin).parent
        for path in (p for pattern in patterns for p in root.glob(pattern)):
            names |= set(re.findall(r"(?:self\.|def |cls\.)(_[a-z]\w*)", path.read_text(errors="replace")))
    return names


PATCHED_LIBRARIES = ("trl", "transformers", "vllm", "accelerate", "peft")


def module_and_class_patches(package_dir) -> list[tuple[str, str, str]]:
    """``(object, attribute, "file:line")`` for every assignment (``X.attr = ...``, ``setattr(X, "attr", ...)``) to an
    attribute of a module or class the same file imports from TRL, transformers, vLLM, accelerate or PEFT."""
    found = []
    for path in sorted(Path(package_dir).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        imported = {}  # local name -> "module" or "module:Name"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PATCHED_LIBRARIES:
                for alias in node.names:
                    submodule = (
                        importlib.util.find_spec(f"{node.module}.{alias.name}") if _is_package(node.module) else None
                    )
                    target = f"{node.module}.{alias.name}" if submodule else f"{node.module}:{alias.name}"
                    imported[alias.asname or alias.name] = target
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PATCHED_LIBRARIES:
                        imported[alias.asname or alias.name] = alias.name
        where = f"{path.relative_to(Path(package_dir).parent)}"
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = [(t.value, t.attr) for t in node.targets if isinstance(t, ast.Attribute)]
            elif _is_setattr(node):
                targets = [(node.args[0], node.args[1].value)]
            for base, attribute in targets:
                if isinstance(base, ast.Name) and base.id in imported:
                    found.append((imported[base.id], attribute, f"{where}:{node.lineno}"))
    return found


def _is_setattr(node) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "setattr"
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
    )


def _is_package(module: str) -> bool:
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return False
    return spec is not None and spec.submodule_search_locations is not None
