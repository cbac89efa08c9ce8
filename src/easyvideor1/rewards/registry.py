"""Registry of task types: one decorated scoring function per task, looked up by normalised name.

A task is a module under `rewards/tasks/` with one function decorated by `@register_task`. Names
are normalised (lower-case; spaces, hyphens and underscores are equivalent), so "Multiple Choice",
"multiple_choice" and "multiple-choice" are the same task. Unknown names raise `UnknownTaskError`:
the trainer calls `validate_problem_types` on the dataset at start-up instead of discovering a
typo as a silent fallback in the middle of a run.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import re
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from easyvideor1.rewards.config import RewardConfig
    from easyvideor1.rewards.sample import Sample, TaskScore

TaskFunction = Callable[["Sample"], "TaskScore"]
# A task's answer instruction: fixed text, or a function of the record's options (multiple choice
# names the actual letter range). Module-level functions only: specs travel to worker processes.
Instruction = str | Callable[[list[str] | None], str]


class UnknownTaskError(ValueError):
    """A problem type that no registered task handles."""


@dataclass(frozen=True)
class TaskSpec:
    """A registered task type.

    Attributes:
        name: canonical (normalised) name, e.g. "temporal_grounding".
        function: the scoring function, `fn(sample) -> TaskScore`.
        aliases: normalised alternative names.
        expensive: True when one score costs milliseconds or more (code execution, symbolic math);
            the batch scorer sends those to its process pool.
        instruction: the text put after a question to ask for the answer in the form this task's
            scorer reads (see `rewards.instructions.answer_instruction`), or None for the generic one.
    """

    name: str
    function: TaskFunction
    aliases: tuple[str, ...]
    expensive: bool
    instruction: Instruction | None = None


_TASKS: dict[str, TaskSpec] = {}  # canonical name -> spec
_NAMES: dict[str, str] = {}  # canonical name or alias -> canonical name
_LOCK = threading.Lock()
_BUILTINS_LOADED = False


@lru_cache(maxsize=4096)
def normalize_task_name(name: str) -> str:
    """Lower-case `name` and make spaces, hyphens and underscores equivalent ("Video QA" -> "video_qa")."""
    return re.sub(r"[\s_\-]+", "_", str(name).strip().lower()).strip("_")


def register_task(
    name: str,
    aliases: Iterable[str] = (),
    *,
    expensive: bool = False,
    override: bool = False,
    instruction: Instruction | None = None,
) -> Callable[[TaskFunction], TaskFunction]:
    """Register the decorated function as the scorer of task `name` (and its `aliases`).

    The function receives a `Sample` and returns a `TaskScore`. Registering a name or alias that
    another task already owns is an error unless `override=True` (a user file replacing a built-in).
    `instruction` is the answer-format instruction prompts append to the task's questions (text, or
    a function of the options); the prompts of a task without one ask generically for an `<answer>`.
    """
    if instruction is not None and not (callable(instruction) or isinstance(instruction, str)):
        raise TypeError(f"task {name!r}: instruction must be a string or a function of the options")

    def decorator(function: TaskFunction) -> TaskFunction:
        canonical = normalize_task_name(name)
        alias_names = tuple(dict.fromkeys(normalize_task_name(a) for a in aliases if normalize_task_name(a)))
        spec = TaskSpec(canonical, function, alias_names, expensive, instruction)
        with _LOCK:
            for key in (canonical, *alias_names):
                owner = _NAMES.get(key)
                same_function = owner is not None and _is_same_function(_TASKS[owner].function, function)
                if owner is not None and owner != canonical and not override and not same_function:
                    raise ValueError(f"task name {key!r} is already registered by task {owner!r}")
            if canonical in _TASKS and override:
                for key in _TASKS[canonical].aliases:
                    _NAMES.pop(key, None)
            _TASKS[canonical] = spec
            for key in (canonical, *alias_names):
                _NAMES[key] = canonical
        return function

    return decorator


def _is_same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (e.g. a user file loaded again in a worker) re-registers the "same" function.
    return getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None) and getattr(
        a, "__module__", None
    ) == getattr(b, "__module__", None)


def _ensure_builtin_tasks() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        importlib.import_module("easyvideor1.rewards.tasks")
        _BUILTINS_LOADED = True


def resolve_task(problem_type: str) -> TaskSpec:
    """The task registered for `problem_type` (any alias, any spelling); raises `UnknownTaskError`."""
    _ensure_builtin_tasks()
    key = normalize_task_name(problem_type)
    canonical = _NAMES.get(key)
    if canonical is None:
        close = difflib.get_close_matches(key, list(_NAMES), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownTaskError(
            f"unknown problem_type {problem_type!r}{hint} (known: {', '.join(sorted(_TASKS))})"
        )
    return _TASKS[canonical]


def registered_tasks() -> dict[str, TaskSpec]:
    """Canonical name -> spec of every registered task (built-ins included)."""
    _ensure_builtin_tasks()
    return dict(_TASKS)


def validate_problem_types(
    problem_types: Iterable[str], config: RewardConfig | None = None
) -> dict[str, str]:
    """Check, before training starts, that every problem type of a dataset has a task.

    Loads `config.task_files`, then resolves each distinct problem type. Returns raw name ->
    canonical task name. Raises `UnknownTaskError` listing every unknown type at once. With a custom
    `config.reward_function` the dataset's types are the function's business and are not checked.
    """
    if config is not None:
        load_task_files(config.task_files)
        for name in config.task_weights:
            resolve_task(name)
        if config.reward_function:
            load_callable(config.reward_function)
            return {str(t): str(t) for t in dict.fromkeys(problem_types)}
    resolved: dict[str, str] = {}
    unknown: list[str] = []
    for problem_type in dict.fromkeys(problem_types):
        try:
            resolved[problem_type] = resolve_task(problem_type).name
        except UnknownTaskError:
            close = difflib.get_close_matches(
                normalize_task_name(problem_type), list(_NAMES), n=1, cutoff=0.6
            )
            unknown.append(repr(problem_type) + (f" (did you mean {close[0]!r}?)" if close else ""))
    if unknown:
        raise UnknownTaskError(
            f"no reward task for problem_type {', '.join(unknown)}; known: {', '.join(sorted(_TASKS))}. "
            "Register one with @register_task in a file listed in RewardConfig.task_files."
        )
    return resolved


_LOADED_FILES: dict[str, Any] = {}


def _load_module_from_file(path: str) -> Any:
    resolved = str(Path(path).expanduser().resolve())
    with _LOCK:
        module = _LOADED_FILES.get(resolved)
    if module is not None:
        return module
    if not Path(resolved).is_file():
        raise FileNotFoundError(f"reward file not found: {path}")
    # A stable module name per path lets pickled functions of the file resolve in worker processes.
    module_name = "easyvideor1_user_reward_" + hashlib.sha1(resolved.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    with _LOCK:
        _LOADED_FILES[resolved] = module
    return module


def load_task_files(paths: Iterable[str]) -> None:
    """Import user task files so that their `@register_task` decorators run (idempotent)."""
    _ensure_builtin_tasks()
    for path in paths:
        _load_module_from_file(path)


def load_callable(spec: str, default_name: str = "compute_score") -> Callable[..., Any]:
    """Load `"path/to/file.py:function"` (EasyR1 convention) or `"package.module:function"`; the
    function name defaults to `default_name`."""
    path, separator, name = spec.rpartition(":")
    if separator and not path.endswith(".py") and "/" not in path and "\\" not in path:
        import importlib

        function = getattr(importlib.import_module(path), name, None)
        if not callable(function):
            raise AttributeError(f"{path} has no callable {name!r}")
        return function
    if not separator or not path.endswith(".py"):
        path, name = spec, default_name
    module = _load_module_from_file(path)
    function = getattr(module, name, None)
    if not callable(function):
        raise AttributeError(f"{path} has no callable {name!r}")
    return function
