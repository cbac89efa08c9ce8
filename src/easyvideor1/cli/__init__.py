"""The ``easyvideor1`` command line (also ``python -m easyvideor1``).

Every command accepts ``config=FILE.yaml`` and dotted ``section.key=value`` overrides after its
flags; flags are shortcuts for the most used keys. ``run.py`` holds the data and training commands,
``evaluate.py`` the evaluation ones, ``curate.py`` the pass-rate filter, ``plan.py`` the memory planner, ``common.py`` the
flags they share.

Errors: a :class:`~easyvideor1.errors.UserError` (a config key, a path, a record, a flag), an
unusable output path or cache entry, or a file that cannot be read is printed as one line (exit 2,
or 1 for a machine failure such as a full disk); any other exception is a bug and prints its
traceback (exit 1). ``--debug`` (or ``EASYVIDEOR1_DEBUG=1``) prints the traceback of user errors
too. A deprecated key (``FutureWarning`` from this package) is one line as well.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings

from .. import threads
from ..errors import UserError
from ..media.cache import CacheError
from ..outdir import OutputError, describe, exit_code_for
from . import curate, evaluate, plan, run


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error form: one line naming the flag, exit 2 (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


DEBUG_ENV = "EASYVIDEOR1_DEBUG"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="easyvideor1", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of user errors too (also {DEBUG_ENV}=1); other errors always show theirs",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run.add_parsers(sub)
    evaluate.add_parsers(sub)
    curate.add_parsers(sub)
    plan.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))  # the command
    if argv[first : first + 2] == ["eval", "compare"]:  # `easyvideor1 eval compare RUN_A RUN_B`
        argv[first : first + 2] = ["eval-compare"]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    debug = args.debug or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    command = f"easyvideor1 {args.command}"
    # what the user can fix ends here as one line: 2 for what the command line asked for (a flag, a
    # key, a file, a path), 1 for a valid run the machine failed (disk full while writing: outdir.py);
    # anything else is a bug and keeps its traceback
    _one_line_deprecations(command)
    try:
        # before torch loads OpenMP, which would warn about a bad value and carry on with its own
        threads.env_threads()
        return args.func(args, extra)
    except OutputError as e:  # a UserError whose exit code says who failed: 1 when the machine did
        return _user_error(command, str(e), e.exit_code, debug)
    except (UserError, CacheError) as e:  # ConfigError, EvalInputError, RecordError, a bad cache entry
        return _user_error(command, str(e), 2, debug)
    except OSError as e:  # a file the command was given cannot be opened or read
        return _user_error(command, describe(e), exit_code_for(e), debug)
    except Exception:
        traceback.print_exc()
        return 1


def _one_line_deprecations(command: str) -> None:
    """Show this package's ``FutureWarning``s (a renamed key) as one line naming the command, not
    Python's file, line and source line; every other warning keeps Python's form."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    default, shown = warnings.showwarning, set()

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, FutureWarning) and os.path.abspath(filename).startswith(package):
            if str(message) not in shown:  # once, however many times the config is read
                shown.add(str(message))
                print(f"{command}: warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def _user_error(command: str, message: str, exit_code: int, debug: bool) -> int:
    """Print a user error as one line (after its traceback with ``debug``); the exit code."""
    if debug:
        traceback.print_exc()
    print(f"{command}: {message}", file=sys.stderr)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
