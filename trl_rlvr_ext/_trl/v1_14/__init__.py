"""Copies of TRL 1.14.2 methods (see `trl_rlvr_ext._trl`)."""
