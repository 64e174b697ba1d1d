"""The lab: the evidence studies of `trl_rlvr_ext` (their designs, seeds, settings, pages) and their commands.

It lives beside the package in the repository, not in the wheel: run it from a clone, at the repository root,
as ``python -m lab <command>`` (see `lab.cli`). The lab imports the package; the package never imports the lab
(tests/test_architecture.py).
"""
