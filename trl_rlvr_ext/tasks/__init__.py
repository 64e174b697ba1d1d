"""Task sources beyond the embedded toy: procedurally generated, verifiable tasks written by others.

- `trl_rlvr_ext.tasks.reasoning_gym`: the reasoning-gym generators (optional extra ``[gym]``), reachable everywhere a
  dataset name is accepted as ``reasoning_gym:<task>[+<task>...][?option=value&...]``.
"""
