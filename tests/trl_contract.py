"""Which TRL / transformers methods the package overrides, found by walking its classes (shared by the tests)."""

import importlib
import inspect
import pkgutil

import trl_rlvr_ext


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
