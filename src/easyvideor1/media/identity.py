"""What the frame cache knows of a source video file: its stat identity and a sampled content digest.

The cache key (``cache.entry_key``) hashes the path, size, mtime, inode, ctime and the sampled digest;
the manifest keeps the same identity (plus the device and the host that built the entry) so that a
copy of the file on another machine can be matched by content (``manifest.row_fits``). The module
docstring of ``cache.py`` explains which change is caught by what, and the trade-offs.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from .failures import regular_file

EDGE_BYTES = 64 * 1024  # the first and last 64 KiB: container headers and indexes live there
SAMPLE_BYTES = 4 * 1024
SAMPLES = 32  # evenly spaced blocks in between: any rewrite longer than size/32 touches one


@dataclass(frozen=True)
class SourceIdentity:
    """A source file as seen by ``os.stat`` at one moment, and a digest of its sampled content.

    Attributes:
        size: bytes.
        mtime_ns: modification time (users can set it back with ``os.utime``).
        inode: the file's inode number (a new file written and renamed over the path has a new one).
        ctime_ns: status-change time; every write, rename, chmod or ``utime`` sets it to *now*, and no
            user call can set it back, so it tells an in-place rewrite whose mtime was restored.
        dev: the device holding the file (local to one machine: not part of the key).
        digest: SHA-256 (16 hex digits) of the size, the first and last 64 KiB and 32 evenly spaced
            4 KiB blocks (about 256 KiB read per file, cached per stat identity).
    """

    size: int
    mtime_ns: int
    inode: int
    ctime_ns: int
    dev: int
    digest: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceIdentity:
        """Rebuild from a manifest row; ``ValueError`` names the missing or malformed field."""
        values = {}
        for name, kind in (("size", int), ("mtime_ns", int), ("inode", int), ("ctime_ns", int), ("dev", int)):
            v = d.get(name)
            if not isinstance(v, kind) or isinstance(v, bool):
                raise ValueError(f"source identity field {name!r} is {v!r}, expected an integer")
            values[name] = v
        if not isinstance(d.get("digest"), str):
            raise ValueError(f"source identity field 'digest' is {d.get('digest')!r}, expected a string")
        return cls(**values, digest=d["digest"])


def source_identity(path: str) -> SourceIdentity:
    """Stat ``path`` and digest its sampled content (``OSError`` when it cannot be read, a
    ``MediaFailure`` when it is not a regular file: a FIFO would block the digest's open)."""
    st = regular_file(path)
    digest = sampled_digest(path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    return SourceIdentity(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_dev, digest)


def sample_offsets(size: int) -> list[tuple[int, int]]:
    """(offset, length) of every block the digest reads: whole file when it is small."""
    if size <= 2 * EDGE_BYTES + SAMPLES * SAMPLE_BYTES:
        return [(0, size)]
    blocks = [(0, EDGE_BYTES)]
    inner, span = EDGE_BYTES, size - 2 * EDGE_BYTES - SAMPLE_BYTES
    blocks += [(inner + span * i // (SAMPLES - 1), SAMPLE_BYTES) for i in range(SAMPLES)]
    blocks.append((size - EDGE_BYTES, EDGE_BYTES))
    return blocks


@functools.lru_cache(maxsize=65536)
def sampled_digest(path: str, size: int, mtime_ns: int, inode: int, ctime_ns: int) -> str:
    # Cached per full stat identity: data loaders look entries up every epoch, and an in-place
    # rewrite (new ctime) must never be answered from the cache.
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        for offset, length in sample_offsets(size):
            f.seek(offset)
            h.update(f.read(length))
    return h.hexdigest()[:16]
