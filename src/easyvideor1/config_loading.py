"""Reading a configuration: a dataclass tree built from its defaults, a YAML file, a dict of values
and dotted ``key=value`` overrides (EasyR1's convention), and written back as YAML.

Apart from the run-config tree (``config.py``) so that a runtime module that writes a config
(``trainer/background_eval.py``) does not import the tree that imports it. Unknown keys are errors,
so a typo never silently does nothing.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .errors import ConfigError
from .registry import load_plugin_files
from .validation import finite_floats

T = TypeVar("T")


def split_overrides(args: list[str]) -> tuple[str | None, list[str], list[str]]:
    """Separate ``config=FILE`` and ``key=value`` tokens from the rest of a command line."""
    config_file, overrides, rest = None, [], []
    for a in args:
        if a.startswith("config="):
            config_file = a.split("=", 1)[1]
        elif "=" in a and not a.startswith("-"):
            overrides.append(a)
        else:
            rest.append(a)
    return config_file, overrides, rest


def load_dataclass(
    cls: type[T],
    config_file: str | None = None,
    overrides: list[str] | None = None,
    values: dict[str, Any] | None = None,
) -> T:
    """Build ``cls`` from its defaults, a YAML file, a dict of values and dotted overrides (in that order).

    The plug-in files named at ``cls.PLUGIN_FILE_KEYS`` (dotted keys) are imported before the
    sections are built, so a section can check a name a plug-in registers. A key of
    ``cls.RENAMED_KEYS`` (old dotted key -> new) is read as its new key, with a deprecation
    message naming the new one. A NaN or infinite float at any key is refused, naming the key
    (every comparison with NaN is false, so a hand-written range check would let it through)."""
    renamed = getattr(cls, "RENAMED_KEYS", {})
    try:
        merged = OmegaConf.structured(cls)
        if config_file:
            merged = OmegaConf.merge(merged, _renamed(_load_yaml(config_file), renamed))
        if values:
            merged = OmegaConf.merge(merged, _renamed(OmegaConf.create(values), renamed))
        for override in overrides or []:
            key, _, value = override.partition("=")
            if key.strip() in renamed:
                override = f"{_deprecated(key.strip(), renamed)}={value}"
            merged = OmegaConf.merge(merged, _parse_override(override))
        for key in getattr(cls, "PLUGIN_FILE_KEYS", ()):
            plugins = OmegaConf.select(merged, key, default=None)
            if plugins:  # registered before any section checks the names it holds
                load_plugin_files(list(plugins), key=key)
        finite_floats(OmegaConf.to_container(merged, resolve=True))
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        msg = str(e).splitlines()[0]
        where = f" ({config_file} and overrides)" if config_file else ""
        raise ConfigError(f"invalid configuration{f' at {key}' if key else ''}{where}: {msg}") from e
    except ConfigError:
        raise
    except ValueError as e:  # a dataclass check: the message names the dotted key
        raise ConfigError(str(e)) from e


def _deprecated(key: str, renamed: dict[str, str]) -> str:
    """The new name of ``key``, after a deprecation message naming it."""
    warnings.warn(f"{key} is deprecated: use {renamed[key]}", FutureWarning, stacklevel=4)
    return renamed[key]


def _renamed(node: DictConfig, renamed: dict[str, str]) -> DictConfig:
    """``node`` with each old key of ``renamed`` it sets moved to the new key."""
    for old in renamed:
        parent_key, _, leaf = old.rpartition(".")
        parent = OmegaConf.select(node, parent_key) if parent_key else node
        if isinstance(parent, DictConfig) and leaf in parent:
            value = parent[leaf]
            del parent[leaf]
            OmegaConf.update(node, _deprecated(old, renamed), value, merge=True)
    return node


def written_keys(config_file: str | None, overrides: list[str] | None = None) -> set[str]:
    """The dotted keys (leaves) that ``config_file`` and ``overrides`` set: what the user wrote,
    as opposed to a default."""
    written = OmegaConf.create()
    if config_file:
        written = OmegaConf.merge(written, _load_yaml(config_file))
    for override in overrides or []:
        written = OmegaConf.merge(written, _parse_override(override))
    keys: set[str] = set()

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            keys.add(prefix[:-1])

    walk(OmegaConf.to_container(written), "")
    return keys


def _parse_override(override: str) -> DictConfig:
    """One ``key=value`` override; a value YAML cannot parse (``[a.jsonl``) is a ConfigError naming it."""
    try:
        return OmegaConf.from_dotlist([override])
    except yaml.YAMLError as e:
        key, _, value = override.partition("=")
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"override '{key}': cannot parse value '{value}': {problem}") from e


def _load_yaml(path: str) -> DictConfig:
    """A YAML mapping from ``path``; every way it can be unusable is a ConfigError naming the file."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file not found: {path}")
    if p.is_dir():
        raise ConfigError(f"config file {path} is a directory (expected a YAML file)")
    try:
        loaded = OmegaConf.load(p)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}{line}: invalid YAML ({problem})") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} cannot be read ({e})") from e
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path}: a config file must be a mapping of sections, got a list")
    return loaded


def to_yaml(cfg: Any) -> str:
    """A config dataclass as the YAML that :func:`load_dataclass` reads back."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
