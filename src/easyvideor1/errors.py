"""The errors a user can fix, as one family: a configuration key, a path, a record, a flag.

The command line prints a :class:`UserError` as one line and exits 2; any other exception is a bug
and keeps its traceback (``easyvideor1 --debug`` shows the traceback of user errors too). Raise
one of these (or a subclass) for what the user can change, and a plain ``ValueError`` /
``RuntimeError`` for what only a code change can fix.
"""

from __future__ import annotations


class UserError(ValueError):
    """Something the user can fix: the message names it (the key, the file, the record) and why."""


class ConfigError(UserError):
    """A configuration key's value that cannot run: the message names the key."""
