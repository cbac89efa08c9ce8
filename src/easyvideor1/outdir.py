"""Output directories: checked before a command writes into them, held by one run at a time, and
write failures turned into one line that names the file.

- :func:`hold` (``eval``, ``score``, ``filter``, ``train``): creates the directory, then takes an
  exclusive ``flock`` on ``<dir>/.lock`` for the whole run and writes who holds it (pid, host,
  command, start time) into the file as JSON. A second run into the same directory stops at once,
  naming the holder, instead of appending its rows among the first run's. The kernel drops a
  ``flock`` when its process dies, so a killed run never leaves a stale lock behind: the JSON is
  only what the next run reports, never what decides.
- :func:`check_writable` (``preprocess``): the same directory checks without the lock, because
  preprocess runs on one cache directory may overlap on purpose (shards, train and eval files;
  the manifest merge has its own lock, ``media/manifest.py``).
- :func:`writing`: wraps a write so that an ``OSError`` (full disk, file size limit, I/O error)
  becomes an :class:`OutputError` naming the file; the writers write a temporary file and rename
  it (:func:`write_text_atomic`), so the previous version of the file stays whole.
- Symbolic links are never written through: ``.lock`` is opened with ``O_NOFOLLOW`` (a link planted
  there is refused, naming it), and a file the run creates under a scratch name (a temporary file,
  ``checkpoints/latest.tmp``) is made by :func:`create_file`, which removes whatever entry holds the
  name (a link itself, never its target) and creates the file exclusively.
- Every file or folder of a fixed name that a command writes under its output directory
  (``metrics.jsonl``, ``generations.jsonl``, ``tensorboard/``, ``predictions.jsonl``,
  ``results.json``, ``report.html``, ``pass_rates.jsonl``, ``kept/``, ...) goes through one of
  :func:`open_append` (appended rows), :func:`replacing` / :func:`write_text_atomic` (a file
  written whole) and :func:`make_dir` (a folder): a symbolic link planted at that name, or a FIFO,
  is refused with one line naming it, never followed and never removed.
- :class:`Reuse`: a command that replaces files of fixed names (``eval``'s ``results.json``,
  ``report.html``) refuses a non-empty directory that no earlier run of its kind wrote, unless asked
  to reuse it; the ``.lock`` every run leaves behind names the command that last held the directory.

Exit codes (``cli.main``): 2 for a path that cannot be used at all (not a directory, read-only,
held by another run), 1 for a run that failed while writing (no space, file too large, I/O error).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import UserError

LOCK_NAME = ".lock"

# Lock descriptors this process holds. A forked child (media loaders, data workers) would share the
# lock with its copy of the descriptor and keep it after the run itself was killed, until the child
# exits too; the child closes its copy instead (the parent's keeps the lock).
_HELD: set[int] = set()


def _close_held_after_fork() -> None:
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_after_fork)

# the machine, not the command line, failed the write: the run was valid, so exit 1, not 2
_RESOURCE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


class OutputError(UserError):
    """An output path that cannot be used or written, named in the message; ``exit_code`` is what
    the CLI exits with: 2 for a path the user can change, 1 when the machine failed the write."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def reason(e: OSError) -> str:
    """``No space left on device (ENOSPC)``: the errno's text and name, without the path."""
    name = errno.errorcode.get(e.errno or 0)
    text = e.strerror or str(e)
    return f"{text} ({name})" if name else text


def describe(e: OSError) -> str:
    """One line for an OSError that reached the command line: the file, then why."""
    if e.errno is None:  # raised with a message of its own (``FileNotFoundError("data file ...")``)
        return str(e)
    return f"{e.filename}: {reason(e)}" if e.filename else reason(e)


def exit_code_for(e: OSError) -> int:
    return 1 if e.errno in _RESOURCE_ERRNOS else 2


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Run a write of ``path``; an OSError inside becomes one OutputError naming ``path``."""
    try:
        yield
    except OSError as e:
        raise OutputError(f"cannot write {path}: {reason(e)}", exit_code_for(e)) from e


def create_file(path: str | os.PathLike, data: bytes) -> None:
    """Create ``path`` holding ``data``, never through a symbolic link: an entry already at ``path``
    that is not a directory (a stale file, a planted link) is removed itself, then the file is
    created exclusively (``O_EXCL | O_NOFOLLOW``), so nothing outside the directory is written."""
    with os.fdopen(_create(path), "wb") as f:
        f.write(data)


def _create(path: str | os.PathLike) -> int:
    """The descriptor of a file created exclusively at ``path``, whatever entry stood there removed
    itself (see :func:`create_file`)."""
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(path)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)


def refuse_link(path: str | os.PathLike) -> None:
    """An OutputError naming ``path`` when a symbolic link stands there: a file or folder the run
    writes under a fixed name is never written, replaced or appended to through a link."""
    if os.path.islink(path):
        raise OutputError(
            f"{path}: is a symbolic link, not a file this run writes; remove it or choose another output directory"
        )


def open_append(path: str | os.PathLike, binary: bool = False) -> IO:
    """``path`` opened to append to (created when missing): UTF-8 text, or with ``binary`` unbuffered
    bytes (each ``write`` one system call, so processes appending together never split a line).
    A symbolic link there is refused (``O_NOFOLLOW``), and so is anything but a regular file (a
    FIFO would block the run), naming ``path``; any other failure is an OutputError too."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with writing(path):
        not_a_file = OutputError(
            f"{path}: is not a regular file; remove it or choose another output directory"
        )
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                refuse_link(path)
            if e.errno == errno.ENXIO:  # a FIFO no process reads
                raise not_a_file from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise not_a_file
        return os.fdopen(fd, "ab", buffering=0) if binary else os.fdopen(fd, "a", encoding="utf-8")


@contextlib.contextmanager
def replacing(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """A file to write ``path`` whole or not at all: what the caller writes goes to a temporary file
    beside it (created exclusively, as :func:`create_file` creates: never through a link), synced,
    then renamed over ``path``. A symbolic link at ``path`` is refused, naming it; a failed write
    (full disk) leaves the previous ``path`` as it was and no temporary file behind, and is an
    OutputError naming ``path``."""
    path = Path(path)
    refuse_link(path)
    tmp = path.with_name(f".{path.name}.tmp.{socket.gethostname()}.{os.getpid()}")
    with writing(path):
        try:
            fd = _create(tmp)
            with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (:func:`replacing`)."""
    with replacing(path) as f:
        f.write(text)


def save_figure(figure, path: str | os.PathLike, **savefig: object) -> None:
    """A matplotlib ``figure`` saved as ``path`` (its format from the suffix) through
    :func:`replacing`; ``savefig``: more arguments of ``Figure.savefig``."""
    with replacing(path, binary=True) as f:
        figure.savefig(f, format=Path(path).suffix.lstrip("."), **savefig)


def make_dir(path: str | os.PathLike) -> Path:
    """Folder ``path`` of an output directory, created when missing; a symbolic link there is refused,
    naming it, so what the run writes inside stays inside the output directory."""
    refuse_link(path)
    with writing(path):
        os.makedirs(path, exist_ok=True)
    return Path(path)


def check_writable(path: str | os.PathLike, flag: str) -> Path:
    """Create directory ``path`` (named by ``flag`` in errors) and prove a file can be made in it.

    The proof is a real file, not ``os.access``: root passes every permission check yet still
    cannot write a read-only filesystem."""
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise OutputError(f"{flag} {path}: exists and is not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputError(f"{flag} {path}: cannot write there: {reason(e)}", exit_code_for(e)) from e
    return root


@contextlib.contextmanager
def hold(path: str | os.PathLike, flag: str, command: str, reuse: Reuse | None = None) -> Iterator[Path]:
    """Hold directory ``path`` for this run (see the module docstring); yields it, created.
    ``reuse``: which non-empty directories the command may write into (None: any)."""
    import fcntl

    root = check_writable(path, flag)
    if reuse is not None:
        reuse.check(root, flag)
    lock_path = root / LOCK_NAME
    fd = _open_lock(lock_path, flag)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(
                f"{path}: in use by another run ({_holder(lock_path)}); wait for it or choose another {flag}"
            ) from None
        except OSError as e:  # a filesystem without locks (some FUSE mounts): run, but say so
            warning = f"warning: cannot lock {lock_path} ({reason(e)}); not guarded against a second run"
            print(warning, file=sys.stderr)
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "argv": sys.argv,
        }
        with contextlib.suppress(OSError):  # who holds it is a courtesy; the flock is the lock
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        _HELD.add(fd)
        yield root
    finally:
        _HELD.discard(fd)
        os.close(fd)  # releases the flock


def _open_lock(lock_path: Path, flag: str) -> int:
    """The descriptor of ``lock_path``, a regular file of the directory itself: a symbolic link
    there (which would make the run truncate its target) or a FIFO is refused, naming it."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OutputError(
                f"{lock_path}: is a symbolic link, not this directory's lock file; remove it or choose another {flag}"
            ) from None
        raise OutputError(
            f"{flag} {lock_path.parent}: cannot create {LOCK_NAME}: {reason(e)}", exit_code_for(e)
        ) from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(f"{lock_path}: is not a regular file; remove it or choose another {flag}")
    return fd


@dataclasses.dataclass(frozen=True)
class Reuse:
    """Which non-empty directories a command writes into: one that a run of ``commands`` held last
    (its ``.lock`` names that command), and any other only when ``asked`` (the user gave ``flag``):
    a folder of someone else's files, whose files of the same names the command would replace."""

    commands: tuple[str, ...]
    flag: str
    asked: bool = False

    def check(self, root: Path, flag: str) -> None:
        # a lock file alone holds nothing to replace (a run of another command may hold it now:
        # then the lock, not this check, names the holder)
        if self.asked or next((p for p in root.iterdir() if p.name != LOCK_NAME), None) is None:
            return
        if _last_command(root / LOCK_NAME) in self.commands:
            return
        raise OutputError(
            f"{flag} {root}: not empty and not the output of an earlier {self.commands[0]} run; "
            f"choose an empty or new directory, or give {self.flag} to write into it anyway"
        )


def _last_command(lock_path: Path) -> str | None:
    """The command recorded in ``lock_path`` by the run that held the directory last, if any."""
    if lock_path.is_symlink() or not lock_path.is_file():
        return None
    try:
        info = json.loads(lock_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info.get("command") if isinstance(info, dict) else None


def _holder(lock_path: Path) -> str:
    """``pid 1234 on host, started <time>, command eval`` from the lock file, as far as it is known."""
    try:
        info = json.loads(lock_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "holder not recorded yet"
    if not isinstance(info, dict):
        return "holder not recorded"
    host = f" on {info['host']}" if info.get("host") and info.get("host") != socket.gethostname() else ""
    return f"pid {info.get('pid')}{host}, started {info.get('started')}, command {info.get('command')}"
