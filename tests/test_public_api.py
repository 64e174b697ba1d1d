"""The public surface is the product's: the API reference documents exported names only, every top-level export is
documented, and no module of the package is named like a name its package exports (``evaluation.pass_at_k`` was both
a module and the function)."""

import ast
import importlib
import inspect
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "trl_rlvr_ext"
API = ROOT / "docs" / "reference" / "api.md"
# The subpackages users import, each by its `__all__` (docs/reference/api.md says so); the rest is internal
PUBLIC_PACKAGES = ("evaluation", "sampling", "lora_init", "curation", "losses", "rewards", "testing")


def _documented() -> list[str]:
    return re.findall(r"^::: (\S+)$", API.read_text(), flags=re.MULTILINE)


def _resolve(path: str):
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def _exported() -> dict[int, list[str]]:
    """id(object) -> the public names it is exported as (``trl_rlvr_ext.X`` or ``trl_rlvr_ext.<public package>.X``)."""
    out: dict[int, list[str]] = {}
    for package in ["trl_rlvr_ext", *(f"trl_rlvr_ext.{name}" for name in PUBLIC_PACKAGES)]:
        module = importlib.import_module(package)
        for name in module.__all__:
            out.setdefault(id(getattr(module, name)), []).append(f"{package}.{name}")
    return out


def test_the_api_reference_documents_exported_names_only():
    exported = _exported()
    bad = []
    for path in _documented():
        obj = _resolve(path)
        if inspect.ismodule(obj):
            bad.append(f"{path}: a module; document the names it exports instead")
        elif id(obj) not in exported:
            bad.append(f"{path}: not exported by trl_rlvr_ext or by one of {PUBLIC_PACKAGES}")
    assert not bad, "docs/reference/api.md:\n" + "\n".join(bad)


def test_every_top_level_export_is_documented():
    import trl_rlvr_ext

    documented = {id(_resolve(path)) for path in _documented()}
    missing = [
        name
        for name in trl_rlvr_ext.__all__
        if name != "__version__" and id(getattr(trl_rlvr_ext, name)) not in documented
    ]
    assert not missing, f"document these in docs/reference/api.md: {missing}"


def _exported_names(init: Path) -> set[str]:
    """What a package's ``__init__.py`` exports, read without importing it: the names it imports, defines or lists in
    ``__all__`` and in its lazy table (``_LAZY``)."""
    names: set[str] = set()
    for node in ast.parse(init.read_text(), str(init)).body:
        if isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, (ast.List, ast.Tuple, ast.Dict))
            and any(isinstance(t, ast.Name) and t.id in ("__all__", "_LAZY") for t in node.targets)
        ):
            elements = node.value.keys if isinstance(node.value, ast.Dict) else node.value.elts
            names |= {e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return names - {"__version__"}


def clashes(package_root: Path) -> list[str]:
    """``package.name`` for every submodule (file or package) of ``package_root`` named like a name its package
    exports: ``from package import name`` would then depend on import order and tooling."""
    out = []
    for init in sorted(package_root.rglob("__init__.py")):
        folder = init.parent
        submodules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
        submodules |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        dotted = ".".join(folder.relative_to(package_root.parent).parts)
        out += [f"{dotted}.{name}" for name in sorted(submodules & _exported_names(init))]
    return out


def test_no_module_is_named_like_a_name_its_package_exports():
    assert clashes(PACKAGE) == [], "rename the module (e.g. evaluation/pass_at_k.py became evaluation/estimators.py)"


def test_the_clash_check_finds_a_clash(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .score import score\nfrom .sub import helper\n__all__ = ['score']\n")
    (package / "score.py").write_text("def score(): ...\n")
    (package / "sub" / "__init__.py").write_text("_LAZY = {'helper': '.helper', 'other': '.x'}\n")
    (package / "sub" / "helper.py").write_text("")
    assert clashes(package) == ["pkg.score", "pkg.sub.helper"]


def test_pass_at_k_is_the_function():
    import trl_rlvr_ext
    from trl_rlvr_ext.evaluation import pass_at_k
    from trl_rlvr_ext.evaluation.estimators import pass_at_k as defined

    assert pass_at_k is defined and trl_rlvr_ext.pass_at_k is defined and inspect.isfunction(pass_at_k)
