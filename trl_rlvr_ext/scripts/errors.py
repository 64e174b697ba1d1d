"""How the command line reports a mistake: one line that says what is wrong and what to change.

- The package's own checks raise `ValueError`, `FileNotFoundError`, `ConnectionError`, `ImportError` (install hints)
  or `RewardFunctionError` with a message written for the user: the CLI prints it as ``<prog>: error: <message>``,
  without the traceback, and exits with status 1. ``--debug`` (anywhere on the command line, or
  ``TRL_RLVR_EXT_DEBUG=1``, which the launched processes inherit) shows the traceback instead.
- A bad option value (``--loss_type dapoo``, ``--learning_rate abc``) prints argparse's one-line error and that
  option's help, not the usage of the training parsers' 200-odd options.
"""

import os
import re
import sys


DEBUG_FLAG = "--debug"
DEBUG_ENV = "TRL_RLVR_EXT_DEBUG"


def pop_debug_flag(argv: list[str]) -> list[str]:
    """``argv`` without ``--debug``; when it was there, debug mode is on for this process and the ones it launches.
    (Called first by every command-line entry point, which also hides the dependencies' unactionable warnings.)"""
    from .quiet import quiet_dependency_warnings

    quiet_dependency_warnings()
    if DEBUG_FLAG in argv:
        os.environ[DEBUG_ENV] = "1"
    return [arg for arg in argv if arg != DEBUG_FLAG]


def debug_mode() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false", "False")


def _clear_errors() -> tuple[type[BaseException], ...]:
    from ..rewards.guard import RewardFunctionError

    return ValueError, FileNotFoundError, ConnectionError, ImportError, RewardFunctionError


def run_reporting_errors(prog: str, func, *args) -> int:
    """``func(*args)`` (a command's main, returning its exit status); a clear error of ours becomes one line on stderr
    and status 1, unless debug mode is on."""
    try:
        return int(func(*args) or 0)
    except _clear_errors() as error:
        if debug_mode():
            raise
        message = str(error) or type(error).__name__
        print(f"{prog}: error: {message}\n(run again with --debug for the traceback)", file=sys.stderr)
        return 1


_ARGUMENT = re.compile(r"argument ((?:--?[\w-]+)(?:/--?[\w-]+)*)")


def concise_parser_errors(parser, prog: str) -> None:
    """Make ``parser.error`` print the error and the offending option's help instead of the whole usage text."""

    def error(message: str):
        lines = [f"{prog}: error: {message}"]
        match = _ARGUMENT.search(message)
        if match:
            names = set(match.group(1).split("/"))
            for action in parser._actions:
                if names & set(action.option_strings):
                    default = "" if action.default is None else f" (default: {action.default})"
                    lines.append(f"  {', '.join(action.option_strings)}: {action.help or ''}{default}")
                    break
        lines.append(f"Run `{prog} --help` for the most used options, `--help-all` for all of them.")
        print("\n".join(lines), file=sys.stderr)
        raise SystemExit(2)

    parser.error = error
