"""The ``easyvideor1`` command line (also ``python -m easyvideor1``).

Every command accepts ``config=FILE.yaml`` and dotted ``section.key=value`` overrides after its
flags; flags are shortcuts for the most used keys. ``run.py`` holds the data and training commands,
``evaluate.py`` the evaluation ones, ``curate.py`` the pass-rate filter, ``common.py`` the
flags they share.
"""

from __future__ import annotations

import argparse
import sys

from .. import threads
from ..media.cache import CacheError
from ..outdir import OutputError, describe, exit_code_for
from . import curate, evaluate, run


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error form: one line naming the flag, exit 2 (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="easyvideor1", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run.add_parsers(sub)
    evaluate.add_parsers(sub)
    curate.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["eval", "compare"]:  # `easyvideor1 eval compare RUN_A RUN_B`
        argv = ["eval-compare", *argv[2:]]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # user errors end here as one line: 2 for what the command line asked for (a flag, a key, a
    # file, a path), 1 for a valid run the machine failed (disk full while writing: outdir.py)
    try:
        # before torch loads OpenMP, which would warn about a bad value and carry on with its own
        threads.env_threads()
        return args.func(args, extra)
    except OutputError as e:
        print(f"easyvideor1 {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except (ValueError, CacheError) as e:  # ConfigError, EvalInputError, RecordError, dataclass checks
        print(f"easyvideor1 {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file the command was given cannot be opened or read
        print(f"easyvideor1 {args.command}: {describe(e)}", file=sys.stderr)
        return exit_code_for(e)


if __name__ == "__main__":
    sys.exit(main())
