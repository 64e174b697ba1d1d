"""``assert_matches_reference``: a pure function against a reference implementation, case by case."""

import math


def _describe(value, limit: int = 120) -> str:
    text = repr(value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        text = f"tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _difference(got, want, atol, rtol, where: str) -> str | None:
    """Where and how ``got`` differs from ``want`` (None when equal: exactly, or within atol + rtol |want|)."""
    import torch

    exact = atol is None and rtol is None
    if isinstance(want, torch.Tensor) or isinstance(got, torch.Tensor):
        if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)):
            return f"{where}: a {type(got).__name__} where the reference returns a {type(want).__name__}"
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"{where}: shape {tuple(got.shape)} {got.dtype} instead of {tuple(want.shape)} {want.dtype}"
        if exact:
            same = torch.equal(got, want) or bool(((got == want) | (got.isnan() & want.isnan())).all())
        else:
            same = torch.allclose(got, want, atol=atol or 0.0, rtol=rtol or 0.0, equal_nan=True)
        if same:
            return None
        delta = (got.double() - want.double()).abs().nan_to_num(nan=math.inf)
        index = tuple(int(i) for i in torch.nonzero(delta == delta.max())[0]) if delta.dim() else ()
        return (
            f"{where}: max |got - want| = {delta.max().item():.6g} at index {index} "
            f"(got {got[index].item()!r}, want {want[index].item()!r})"
        )
    if isinstance(want, dict):
        if not isinstance(got, dict) or got.keys() != want.keys():
            return f"{where}: keys {sorted(got) if isinstance(got, dict) else got!r} instead of {sorted(want)}"
        for key in want:
            if found := _difference(got[key], want[key], atol, rtol, f"{where}[{key!r}]"):
                return found
        return None
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"{where}: {_describe(got)} instead of {_describe(want)}"
        for index, (g, w) in enumerate(zip(got, want)):
            if found := _difference(g, w, atol, rtol, f"{where}[{index}]"):
                return found
        return None
    if isinstance(want, float) and isinstance(got, (int, float)):
        if math.isnan(want) and math.isnan(got):
            return None
        close = got == want if exact else math.isclose(got, want, abs_tol=atol or 0.0, rel_tol=rtol or 0.0)
        return None if close else f"{where}: {got!r} instead of {want!r} (difference {got - want:.6g})"
    return None if got == want else f"{where}: {_describe(got)} instead of {_describe(want)}"


def assert_matches_reference(fn, reference, cases, *, atol: float | None = None, rtol: float | None = None) -> None:
    """Call ``fn`` and ``reference`` on every case and assert the same results: exactly (bit for bit, NaN equal to
    NaN) by default, or within ``atol + rtol * |want|`` when a tolerance is given.

    ``reference`` is an implementation to hold ``fn`` to: the authors' released code, re-typed, or a plain loop
    written from the paper's equation. Results may be tensors, numbers, or lists, tuples and dicts of them.

    Args:
        cases: the inputs, each a dict of keyword arguments, a tuple of positional arguments, or a
            ``(args, kwargs)`` pair (a tuple of a tuple and a dict).

    Raises:
        AssertionError: naming the first case that differs, its inputs, and where the results differ.
    """
    cases = list(cases)
    if not cases:
        raise ValueError("assert_matches_reference needs at least one case: a check on no input cannot fail.")
    for number, case in enumerate(cases):
        if isinstance(case, dict):
            args, kwargs = (), case
        elif isinstance(case, tuple) and len(case) == 2 and isinstance(case[0], tuple) and isinstance(case[1], dict):
            args, kwargs = case
        elif isinstance(case, tuple):
            args, kwargs = case, {}
        else:
            raise TypeError(f"case {number}: give a dict of keyword arguments or a tuple of positional ones")
        found = _difference(fn(*args, **kwargs), reference(*args, **kwargs), atol, rtol, "result")
        if found:
            inputs = ", ".join([*map(_describe, args), *(f"{k}={_describe(v)}" for k, v in kwargs.items())])
            name = getattr(fn, "__qualname__", repr(fn))
            tolerance = "exactly" if atol is None and rtol is None else f"within atol={atol}, rtol={rtol}"
            raise AssertionError(
                f"{name} does not match {getattr(reference, '__qualname__', repr(reference))} {tolerance} on case "
                f"{number} ({inputs}): {found}"
            )
