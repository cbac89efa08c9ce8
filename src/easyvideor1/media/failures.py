"""Media's error types, and how a media failure is worded: one taxonomy for ``train``, ``eval`` and ``filter``.

A record's media file that cannot be used (missing, unreadable, undecodable, an unusable frame-cache
entry in ``cache_only`` mode, an image PIL refuses or that cannot be resized) is a
:class:`MediaFailure`. Its text is one line, ``<path>: <cause>``, with the path as the record names
it and the cause a short sentence ("file not found", "cannot decode: ...", "frame cache entry
corrupt: ...", "image too large: ..."). Training lists it in ``skipped_records.jsonl``, evaluation
in a failure row of ``predictions.jsonl``, the filter in ``pass_rates.jsonl``: the same record gives
the same text in all three. Anything else raised while loading is a bug and propagates.

The lower layers' errors live here too (:class:`DecodeError` from ``decode.py``, :class:`CacheError`
from ``cache.py``), so that this module imports nothing of ``media/`` and every media module can
import it. Torch-free: run configs and the CLI's help import this module.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..errors import UserError

FILE_NOT_FOUND = "file not found"
# the preprocess hint is part of the cause: it is what the user has to do about it
NO_CACHE_ENTRY = "no cache entry (cache_only mode: run `easyvideor1 preprocess` with the same settings)"


class MediaFailure(UserError):
    """One media file of a record cannot be used: ``path`` (as the record names it) and ``cause``.

    A user error (the record's file is what has to change), hence a ValueError: code that caught
    the old ValueErrors of media loading still catches it.
    """

    def __init__(self, path: str, cause: str):
        self.path, self.cause = str(path), cause
        super().__init__(f"{self.path}: {cause}")

    def __reduce__(self):  # raised in a forked loader, re-raised in the parent with both fields
        return type(self), (self.path, self.cause)

    @property
    def reason(self) -> str:
        """The one line every output records."""
        return str(self)


class DecodeError(RuntimeError):
    """A video could not be decoded; the message says which file and why.

    Not a :class:`~easyvideor1.errors.UserError`: where a record's video fails, :func:`loading`
    words it as that record's :class:`MediaFailure`; one that reaches the top elsewhere is a bug.
    """


class CacheError(UserError, RuntimeError):
    """A missing, corrupt or mismatching cache entry, or an unusable cache directory.

    ``cause``, when set, is the record-facing sentence (this module's wording) a loading failure
    reports after the record's own name for the video. A user error (rebuild the entry with
    ``easyvideor1 preprocess``, fix ``data.cache_dir``), and a RuntimeError as it always was.
    """

    def __init__(self, message: str, cause: str | None = None):
        super().__init__(message)
        self.cause = cause

    def __reduce__(self):
        return type(self), (str(self), self.cause)


# What ``os.stat`` can find at a media path that is not a file. Opening a named pipe blocks until a
# writer appears and a character device may never end, so no reader is allowed to open one. A link
# is only seen by ``os.lstat`` (the frame cache's entries are never followed through one).
_NOT_FILES = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_regular(mode: int) -> str | None:
    """The cause for a path whose ``st_mode`` is not a regular file ("not a regular file (a named
    pipe (FIFO))"), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _NOT_FILES if test(mode)), "not a file")
    return f"not a regular file ({kind})"


def regular_file(path: str, name: str | None = None) -> os.stat_result:
    """``os.stat(path)`` for a regular file; a :class:`MediaFailure` naming ``name`` (``path`` by
    default) for anything else. Called before every open of a media path: ``stat`` never blocks on
    a FIFO or a device, an ``open`` of one can block forever. ``FileNotFoundError`` and other
    ``OSError`` pass through (``loading`` words them)."""
    st = os.stat(path)
    cause = not_regular(st.st_mode)
    if cause is not None:
        raise MediaFailure(path if name is None else name, cause)
    return st


def corrupt_entry(detail: str) -> str:
    return f"frame cache entry corrupt: {detail}"


def unusable_entry(detail: str) -> str:
    return f"frame cache entry does not fit: {detail}"


def missing_media(names: Sequence[str], paths: Sequence[str]) -> MediaFailure | None:
    """The first of ``paths`` that is missing or not a regular file, named as in ``names`` (the
    record's own spelling), or None."""
    for name, path in zip(names, paths, strict=True):
        try:
            cause = not_regular(os.stat(path).st_mode)
        except FileNotFoundError:
            cause = FILE_NOT_FOUND
        except OSError as e:
            cause = f"cannot read: {e.strerror or e}"
        if cause is not None:
            return MediaFailure(name, cause)
    return None


@contextmanager
def loading(name: str, path: str | None = None) -> Iterator[None]:
    """Loading one file: the known low-level errors become a :class:`MediaFailure` naming ``name``
    (the record's spelling of the file; ``path`` is where it was looked for, ``name`` by default).
    Every other exception passes through unchanged."""
    path = name if path is None else path
    try:
        yield
    except MediaFailure as e:
        if e.path == name:
            raise
        raise MediaFailure(name, e.cause) from e  # raised deeper, under the resolved path
    except Exception as e:
        cause = describe(e, path)
        if cause is None:
            raise
        raise MediaFailure(name, cause) from e


def describe(error: BaseException, path: str) -> str | None:
    """The cause sentence for a known low-level error raised while loading ``path``; None when the
    error is not a media failure (a bug, which must propagate)."""
    # imported here: run configs import this module and must not load the decoders
    import av
    from PIL import Image

    if isinstance(error, CacheError):
        return error.cause or _strip(str(error), path)
    if isinstance(error, (DecodeError, av.FFmpegError)):
        try:
            st = os.stat(path)
        except OSError:  # whatever the decoder said: the file is not there
            return FILE_NOT_FOUND
        return not_regular(st.st_mode) or f"cannot decode: {_strip(str(error), path)}"
    if isinstance(error, Image.DecompressionBombError):
        return f"image too large: {error}"
    if isinstance(error, Image.UnidentifiedImageError):
        return "cannot decode: not an image format PIL can read"
    if isinstance(error, FileNotFoundError):
        return FILE_NOT_FOUND
    if isinstance(error, OSError):
        if error.errno is not None:  # the system refused (permissions, a directory, I/O error)
            return f"cannot read: {error.strerror or error}"
        return f"cannot decode: {error}"  # PIL's own OSErrors: a truncated or broken image
    return None


def _strip(message: str, path: str) -> str:
    """``message`` without the file's path where the lower layers put it (a leading ``<path>: ``,
    FFmpeg's trailing ``: '<path>'``) and without FFmpeg's ``[Errno N]`` codes: the failure names
    the file itself, as the record does, and the same file reads the same wherever it was found."""
    paths = {path, os.path.abspath(path), os.path.normpath(path)}
    changed = True
    while changed:
        changed = False
        for p in paths:
            if message.startswith(f"{p}: "):
                message, changed = message[len(p) + 2 :], True
    for p in paths:
        message = message.replace(f": '{p}'", "")
    return re.sub(r"\[Errno -?\d+\] ", "", message)
