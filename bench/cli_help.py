"""Wall time of ``trl-rlvr-ext <command> --help`` for every subcommand (target: well under 3 s; each is a fresh
interpreter, so this includes Python's start-up). ``grpo --help-all``, which builds TRL's full parser, is shown for
scale. Prints the median of ``--repeats`` runs per command.

    python bench/cli_help.py [--repeats 3]
    python bench/cli_help.py --quick      # make bench-quick's run (bench/quick.py): one run per command
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

try:  # run as a script (bench/ on sys.path) or imported as bench.cli_help
    from quick import quick_defaults
except ImportError:
    from bench.quick import quick_defaults


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    quick_defaults(parser, None, repeats=1)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from trl_rlvr_ext.cli import COMMANDS

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    rows = [[name, "--help"] for name in COMMANDS] + [["grpo", "--help-all"]]
    print(f"{'command':<40}median of {args.repeats} (s)")
    for argv in rows:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "trl_rlvr_ext.cli", *argv], check=True, capture_output=True, env=env, cwd=ROOT
            )
            times.append(time.perf_counter() - start)
        print(f"{'trl-rlvr-ext ' + ' '.join(argv):<40}{statistics.median(times):.2f}")


if __name__ == "__main__":
    main()
