"""``python -m lab <command> ...``: the lab's commands (`lab.cli`)."""

import sys

from .cli import main


sys.exit(main())
