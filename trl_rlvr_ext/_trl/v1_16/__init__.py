"""Copies of TRL 1.16.0 methods (see `trl_rlvr_ext._trl`)."""
