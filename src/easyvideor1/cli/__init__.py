"""The ``easyvideor1`` command line (also ``python -m easyvideor1``).

Every command accepts ``config=FILE.yaml`` and dotted ``section.key=value`` overrides after its
flags; flags are shortcuts for the most used keys. ``run.py`` holds the data and training commands,
``evaluate.py`` the evaluation ones, ``curate.py`` the pass-rate filter, ``common.py`` the
flags they share.
"""

from __future__ import annotations

import argparse
import sys

from ..config import ConfigError
from . import curate, evaluate, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="easyvideor1", description=__doc__.splitlines()[0])
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
    try:
        return args.func(args, extra)
    except ConfigError as e:
        print(f"easyvideor1 {args.command}: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:
        print(f"easyvideor1 {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
