"""A tiny name -> function registry shared by advantage estimators, policy losses and KL estimators.

Adding an algorithm is one decorated function (veRL's `@register_adv_est` idea). Names are normalised
(lower-case, `-` and `_` equivalent) so "dr-grpo" and "dr_grpo" are one name. Looking up an unknown
name raises :class:`UnknownAlgorithmError` listing the known names and the closest matches, so a typo
in a config fails at start-up instead of silently selecting a default.
"""

from __future__ import annotations

import difflib
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class UnknownAlgorithmError(ValueError):
    """A name that no registered algorithm (estimator, loss, KL type, ...) answers to."""


def normalize_name(name: str) -> str:
    """Canonical spelling of a registry name: stripped, lower-case, hyphens as underscores."""
    return str(name).strip().lower().replace("-", "_")


class Registry(Generic[F]):
    """Functions registered under a canonical name plus optional aliases.

    Args:
        kind: what the entries are, used in error messages ("advantage estimator").
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._functions: dict[str, F] = {}
        self._names: dict[str, str] = {}  # canonical name or alias -> canonical name
        self._lock = threading.Lock()

    def register(self, name: str, *, aliases: Iterable[str] = (), override: bool = False) -> Callable[[F], F]:
        """Decorator registering a function as `name` (and `aliases`).

        Re-using a name owned by another function is an error unless `override=True`, so a user
        plug-in cannot shadow a built-in by accident.
        """
        canonical = normalize_name(name)
        keys = list(dict.fromkeys([canonical, *(normalize_name(a) for a in aliases)]))
        if not canonical:
            raise ValueError(f"empty {self.kind} name")

        def decorator(function: F) -> F:
            with self._lock:
                for key in keys:
                    owner = self._names.get(key)
                    if owner is None or override:
                        continue
                    current = self._functions[owner]
                    same = (current.__module__, current.__qualname__) == (
                        function.__module__,
                        function.__qualname__,
                    )
                    # Re-importing the same module (e.g. in a worker) re-registers the same function.
                    if owner != canonical or not same:
                        raise ValueError(
                            f"{self.kind} name {key!r} is already registered (by {owner!r}); "
                            "pass override=True to replace it"
                        )
                self._functions[canonical] = function
                for key in keys:
                    self._names[key] = canonical
            return function

        return decorator

    def get(self, name: str) -> F:
        """The function registered as `name` (any alias or spelling); raises `UnknownAlgorithmError`."""
        key = normalize_name(name)
        canonical = self._names.get(key)
        if canonical is None:
            close = difflib.get_close_matches(key, list(self._names), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise UnknownAlgorithmError(
                f"unknown {self.kind} {name!r}{hint}; known: {', '.join(self.names())}. "
                "Register one with the matching @register_* decorator (and import its module first)."
            )
        return self._functions[canonical]

    def canonical(self, name: str) -> str:
        """The canonical name `name` (any alias or spelling) stands for; raises like :meth:`get`."""
        self.get(name)
        return self._names[normalize_name(name)]

    def names(self) -> list[str]:
        """Sorted canonical names."""
        return sorted(self._functions)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalize_name(name) in self._names


def call_with_supported(function: Callable[..., Any], *args: Any, options: Mapping[str, Any]) -> Any:
    """Call `function(*args, **options)` passing only the options its signature accepts.

    This lets the trainer hand every algorithm the full option set built from the config (gamma,
    eps, clip ratios, ...) while each function declares just what it uses. A function with `**kwargs`
    receives everything.
    """
    params = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return function(*args, **options)
    accepted = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return function(*args, **{k: v for k, v in options.items() if k in accepted})


_PLUGINS: dict[str, Any] = {}


def load_plugin_files(paths: Iterable[str], key: str = "algorithm.plugin_files") -> None:
    """Import user files whose `@register_advantage` / `@register_policy_loss` /
    `@register_kl_estimator` decorators add algorithms (idempotent: each file is imported once).

    A missing file, or one that fails to import, raises naming ``key`` and the file.
    """
    import importlib.util
    import sys
    from pathlib import Path

    for path in paths:
        resolved = Path(path).expanduser().resolve()
        if str(resolved) in _PLUGINS:
            continue
        if not resolved.is_file():
            raise ValueError(f"{key}: {path} is not a file")
        name = f"easyvideor1_algorithm_plugin_{len(_PLUGINS)}_{resolved.stem}"
        spec = importlib.util.spec_from_file_location(name, resolved)
        if spec is None or spec.loader is None:
            raise ValueError(f"{key}: {path} cannot be imported as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(name, None)
            raise ValueError(f"{key}: importing {path} failed: {type(e).__name__}: {e}") from e
        _PLUGINS[str(resolved)] = module
