"""The one name -> entry registry behind every pluggable part (estimators, losses, KL types, loss
aggregation modes, filter criteria, reward tasks, benchmarks, model families).

Every registry spells names the same way (:func:`normalize_name`: "Dr-GRPO", "dr_grpo" and
"dr.grpo" are one name), keeps aliases, refuses to hand a taken name to a second entry unless
``override=True``, and answers an unknown name with one line naming the kind, the closest known
names and all known names (:class:`UnknownNameError`, a ``ValueError``).

Built-ins can be declared without importing the code that implements them: ``declare(name,
"package.module:attr", **metadata)`` records the name, its aliases and metadata, and the value is
imported on the first :meth:`Registry.get`. Name checks (:meth:`Registry.canonical`, ``in``,
:meth:`Registry.metadata`) never import it, so validating a config that names ``grpo`` does not load
torch. Registries whose built-ins register themselves at import instead list those modules as
``builtins``; they are imported on the first lookup.

This module imports nothing heavy; keep it that way.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, Generic, TypeVar

from .errors import UserError

T = TypeVar("T")


class UnknownNameError(UserError):
    """A name that no entry of a registry answers to (the message lists the known names)."""


class PluginFileError(UserError):
    """A user file meant to register entries that cannot be loaded (missing, or failing to import)."""


class PluginFileNotFoundError(PluginFileError, FileNotFoundError):
    """A plugin file that does not exist (also a ``FileNotFoundError``, as callers used to catch)."""


_SEPARATORS = re.compile(r"[\s_\-.]+")


@lru_cache(maxsize=4096)
def normalize_name(name: str) -> str:
    """Canonical spelling of a registry name: stripped, lower-case, runs of spaces, ``-``, ``.``
    and ``_`` as one ``_`` ("  Multiple-Choice " -> "multiple_choice", "qwen2.5-vl" -> "qwen2_5_vl")."""
    return _SEPARATORS.sub("_", str(name).strip().lower()).strip("_")


_UNLOADED: Any = object()  # the value of a declared entry before its first `get`


@dataclass
class Entry(Generic[T]):
    """One registered name.

    Attributes:
        name: the name as registered (its display spelling: "token-mean", "mlvu-dev", "grpo").
        aliases: other accepted names, normalised.
        metadata: what the registry's users need to know without loading the value
            (``group=True`` for an estimator comparing the responses of a group, ...).
        target: ``"module:attr"`` of a declared entry, imported on first use; empty otherwise.
    """

    name: str
    aliases: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    target: str = ""
    value: Any = _UNLOADED

    @property
    def loaded(self) -> bool:
        return self.value is not _UNLOADED


def _same_definition(a: Any, b: Any) -> bool:
    """True for one object, or one function/class defined again (its module imported a second time,
    e.g. a user file loaded again in a worker)."""
    if a is b:
        return True
    ka = (getattr(a, "__module__", None), getattr(a, "__qualname__", None))
    kb = (getattr(b, "__module__", None), getattr(b, "__qualname__", None))
    return None not in ka and ka == kb


def _target_of(value: Any) -> str:
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}:{qualname}" if module and qualname else ""


class Registry(Generic[T]):
    """Entries registered under a name plus aliases, with per-entry metadata.

    Args:
        kind: what the entries are, for messages ("advantage estimator", "benchmark").
        builtins: modules that register the built-in entries when imported; imported on the first
            lookup (and before a user entry is registered, so a clash with a built-in is seen).
        error: the :class:`UnknownNameError` subclass raised for unknown names.
        how_to_add: appended to the unknown-name message ("register one with @register_task").
        definition: what identifies a value's definition when it is registered again (default: the
            value itself, compared by identity or module and qualified name); e.g. a task spec's
            scoring function, so that a task file imported twice is not a clash.
    """

    def __init__(
        self,
        kind: str,
        *,
        builtins: Sequence[str] = (),
        error: type[UnknownNameError] = UnknownNameError,
        how_to_add: str = "",
        definition: Callable[[Any], Any] | None = None,
    ) -> None:
        self.kind = kind
        self._definition = definition or (lambda value: value)
        self.error = error
        self.how_to_add = how_to_add
        self._builtins = tuple(builtins)
        self._builtins_state = "loaded" if not self._builtins else "pending"
        self._entries: dict[str, Entry[T]] = {}  # canonical key -> entry, in registration order
        self._keys: dict[str, str] = {}  # any accepted key (name or alias) -> canonical key
        self._lock = threading.RLock()

    # -- registering ---------------------------------------------------------------------------

    def register(
        self,
        name: str,
        value: Any = _UNLOADED,
        *,
        aliases: Iterable[str] = (),
        override: bool = False,
        **metadata: Any,
    ) -> Any:
        """Register ``value`` as ``name`` (and ``aliases``) with ``metadata``; returns ``value``.

        Without ``value``, a decorator doing the same for the decorated object. A name or alias
        taken by another entry is an error unless ``override=True``; registering the same function
        again (its module imported twice) is allowed.
        """
        if value is _UNLOADED:

            def decorator(obj: T) -> T:
                self._add(name, aliases, metadata, obj, "", override)
                return obj

            return decorator
        self._add(name, aliases, metadata, value, "", override)
        return value

    def declare(
        self, name: str, target: str, *, aliases: Iterable[str] = (), override: bool = False, **metadata: Any
    ) -> None:
        """Register ``name`` with a value imported from ``target`` (``"package.module:attr"``) on the
        first :meth:`get`: its name and metadata are known without importing that module."""
        if ":" not in target:
            raise ValueError(f"{self.kind} {name!r}: target must be 'module:attribute', got {target!r}")
        self._add(name, aliases, metadata, _UNLOADED, target, override)

    def _add(
        self,
        name: str,
        aliases: Iterable[str],
        metadata: Mapping[str, Any],
        value: Any,
        target: str,
        override: bool,
    ) -> None:
        display = str(name).strip()
        canonical = normalize_name(display)
        if not canonical:
            raise UserError(f"empty {self.kind} name {name!r}")
        alias_keys = tuple(
            k for k in dict.fromkeys(normalize_name(a) for a in aliases) if k and k != canonical
        )
        self._ensure_builtins()
        with self._lock:
            current = self._entries.get(canonical)
            for key in (canonical, *alias_keys):
                owner = self._keys.get(key)
                if owner is None or override:
                    continue
                mine = self._entries[owner]
                new = self._definition(value) if value is not _UNLOADED else None
                again = owner == canonical and (
                    (new is not None and mine.loaded and _same_definition(self._definition(mine.value), new))
                    or (new is not None and not mine.loaded and mine.target == _target_of(new))
                    or (value is _UNLOADED and mine.target == target)
                )
                if not again:
                    raise UserError(
                        f"{self.kind} name {key!r} is already registered (by {mine.name!r}); "
                        "pass override=True to replace it"
                    )
            if current is not None:
                # the aliases a name had follow it through an override (or a second registration)
                alias_keys = tuple(dict.fromkeys((*current.aliases, *alias_keys)))
                if not override:  # the same entry again keeps its metadata
                    metadata = {**current.metadata, **metadata}
            self._entries[canonical] = Entry(
                display, alias_keys, MappingProxyType(dict(metadata)), target, value
            )
            for key in (canonical, *alias_keys):
                previous = self._keys.get(key)
                if previous is not None and previous != canonical:  # overridden alias of another entry
                    other = self._entries[previous]
                    other.aliases = tuple(a for a in other.aliases if a != key)
                self._keys[key] = canonical

    def _ensure_builtins(self) -> None:
        if self._builtins_state != "pending":
            return  # loaded, or loading now (a built-in module registering itself)
        with self._lock:
            if self._builtins_state != "pending":
                return
            self._builtins_state = "loading"
            try:
                for module in self._builtins:
                    importlib.import_module(module)
            except BaseException:
                self._builtins_state = "pending"
                raise
            self._builtins_state = "loaded"

    # -- looking up ----------------------------------------------------------------------------

    def entry(self, name: str) -> Entry[T]:
        """The entry ``name`` (any alias, any spelling) stands for, without importing a declared
        value; raises :attr:`error` naming the closest and all known names."""
        self._ensure_builtins()
        key = normalize_name(name)
        canonical = self._keys.get(key)
        if canonical is None:
            raise self.unknown(name)
        return self._entries[canonical]

    def get(self, name: str) -> T:
        """The value registered as ``name`` (importing a declared one on first use)."""
        entry = self.entry(name)
        if not entry.loaded:
            with self._lock:
                if not entry.loaded:
                    entry.value = self._import(entry)
        return entry.value

    def _import(self, entry: Entry[T]) -> Any:
        module_name, _, attr = entry.target.partition(":")
        value: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part, None)
            if value is None:
                raise ImportError(f"{self.kind} {entry.name!r}: {entry.target} does not exist")
        return value

    def canonical(self, name: str) -> str:
        """The registered spelling of the entry ``name`` stands for; raises like :meth:`get`."""
        return self.entry(name).name

    def metadata(self, name: str) -> Mapping[str, Any]:
        """The metadata the entry ``name`` was registered with (empty if none); raises like :meth:`get`."""
        return self.entry(name).metadata

    def names(self) -> list[str]:
        """Sorted registered names (aliases left out)."""
        self._ensure_builtins()
        return sorted(e.name for e in self._entries.values())

    def keys(self) -> tuple[str, ...]:
        """Every accepted spelling, normalised (names and aliases), in registration order."""
        self._ensure_builtins()
        return tuple(self._keys)

    def entries(self) -> list[Entry[T]]:
        """The entries in registration order."""
        self._ensure_builtins()
        return list(self._entries.values())

    def suggestions(self, name: str, n: int = 3) -> list[str]:
        """Accepted names closest to ``name`` (for "did you mean")."""
        self._ensure_builtins()
        close = difflib.get_close_matches(normalize_name(name), list(self._keys), n=n, cutoff=0.6)
        shown = []  # an entry's own name as registered ("token-mean"), an alias as normalised
        for key in close:
            entry = self._entries[self._keys[key]]
            shown.append(entry.name if key == normalize_name(entry.name) else key)
        return list(dict.fromkeys(shown))

    def unknown(self, name: str) -> UnknownNameError:
        """The error for an unknown ``name``: one line with the closest and all known names."""
        close = self.suggestions(name)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        tail = f". {self.how_to_add}" if self.how_to_add else ""
        return self.error(f"unknown {self.kind} {name!r}{hint}; known: {', '.join(self.names())}{tail}")

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        self._ensure_builtins()
        return normalize_name(name) in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._ensure_builtins()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"


_PLUGIN_MODULES: dict[str, ModuleType] = {}
_PLUGIN_LOCK = threading.Lock()


def load_plugin_file(path: str, *, key: str = "plugin file") -> ModuleType:
    """Import the Python file ``path`` so that its registration decorators run; once per file.

    The module's name is stable per resolved path, so functions defined there pickle to worker
    processes. A missing file or a failing import raises :class:`PluginFileError` naming ``key``
    (the setting that listed it) and the file.
    """
    resolved = str(Path(path).expanduser().resolve())
    with _PLUGIN_LOCK:
        module = _PLUGIN_MODULES.get(resolved)
    if module is not None:
        return module
    if not Path(resolved).is_file():
        raise PluginFileNotFoundError(f"{key}: {path} is not a file")
    module_name = "easyvideor1_plugin_" + hashlib.sha1(resolved.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise PluginFileError(f"{key}: {path} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        first = str(e).splitlines()[0] if str(e) else ""
        raise PluginFileError(f"{key}: importing {path} failed: {type(e).__name__}: {first}") from e
    with _PLUGIN_LOCK:
        _PLUGIN_MODULES[resolved] = module
    return module


def load_plugin_files(paths: Iterable[str], *, key: str = "plugin file") -> list[ModuleType]:
    """:func:`load_plugin_file` for each of ``paths``, in order."""
    return [load_plugin_file(p, key=key) for p in paths]


def call_with_supported(function: Callable[..., Any], *args: Any, options: Mapping[str, Any]) -> Any:
    """Call ``function(*args, **options)`` passing only the options its signature accepts.

    The trainer hands every algorithm the full option set built from the config (gamma, eps, clip
    ratios, ...) while each function declares just what it uses; one with ``**kwargs`` gets all.
    """
    import inspect

    params = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return function(*args, **options)
    accepted = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return function(*args, **{k: v for k, v in options.items() if k in accepted})
