"""`evaluate` metric modules shipped with the package, loadable offline with ``evaluate.load(<file path>)``."""

import os


PASS_AT_K_METRIC_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unbiased_pass_at_k.py")
