"""Registry of task types: one decorated scoring function per task, looked up by normalised name.

A task is a module under `rewards/tasks/` with one function decorated by `@register_task`. Names
are normalised like every registry's (`easyvideor1.registry.normalize_name`: lower-case; spaces,
hyphens and underscores are equivalent), so "Multiple Choice", "multiple_choice" and
"multiple-choice" are the same task. Unknown names raise `UnknownTaskError`: the trainer calls
`validate_problem_types` on the dataset at start-up instead of discovering a typo as a silent
fallback in the middle of a run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from easyvideor1.registry import (
    Registry,
    UnknownNameError,
    load_plugin_file,
    load_plugin_files,
    normalize_name,
)
from easyvideor1.rewards.config import RewardConfig, TaskWeights

if TYPE_CHECKING:
    from easyvideor1.rewards.sample import Sample, TaskScore

TaskFunction = Callable[["Sample"], "TaskScore"]
# A task's answer instruction: fixed text, or a function of the record's options (multiple choice
# names the actual letter range). Module-level functions only: specs travel to worker processes.
Instruction = str | Callable[[list[str] | None], str]


class UnknownTaskError(UnknownNameError):
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


def _task_function(spec: TaskSpec) -> Callable[..., Any]:
    return spec.function


TASKS: Registry[TaskSpec] = Registry(
    "problem_type",
    builtins=("easyvideor1.rewards.tasks",),
    error=UnknownTaskError,
    definition=_task_function,  # a task file imported again (in a worker) re-registers the same task
    how_to_add="Register one with @register_task in a file listed in reward.task_files",
)

normalize_task_name = normalize_name  # (the name tasks were normalised by before all registries shared one)


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
    aliases = tuple(aliases)

    def decorator(function: TaskFunction) -> TaskFunction:
        canonical = normalize_name(name)
        alias_names = tuple(
            k for k in dict.fromkeys(normalize_name(a) for a in aliases) if k and k != canonical
        )
        spec = TaskSpec(canonical, function, alias_names, expensive, instruction)
        TASKS.register(canonical, spec, aliases=alias_names, override=override, expensive=expensive)
        return function

    return decorator


def resolve_task(problem_type: str) -> TaskSpec:
    """The task registered for `problem_type` (any alias, any spelling); raises `UnknownTaskError`."""
    return TASKS.get(problem_type)


def weights_for(config: RewardConfig, task: str) -> TaskWeights:
    """The (accuracy, format) weights of the canonical task name ``task``: the ``reward.task_weights``
    entry naming it (by any alias or spelling), else ``reward.accuracy_weight`` / ``format_weight``.
    Resolved here, where the tasks are registered: the config itself stays plain data."""
    for name, weights in config.task_weights.items():
        if normalize_task_name(name) == task or resolve_task(name).name == task:
            return weights
    return TaskWeights(config.accuracy_weight, config.format_weight)


def registered_tasks() -> dict[str, TaskSpec]:
    """Canonical name -> spec of every registered task (built-ins included)."""
    return {entry.name: TASKS.get(entry.name) for entry in TASKS.entries()}


def judge_task_names(names: Iterable[str]) -> set[str]:
    """The canonical names of ``reward.judge.tasks``; an unknown one raises naming the key."""
    try:
        return {resolve_task(name).name for name in names}
    except UnknownTaskError as e:
        raise UnknownTaskError(f"reward.judge.tasks: {e}") from None


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
        judge_task_names(config.judge.tasks)  # a misspelt task would never be judged
        if config.reward_function:
            load_callable(config.reward_function)
            return {str(t): str(t) for t in dict.fromkeys(problem_types)}
    resolved: dict[str, str] = {}
    unknown: list[str] = []
    for problem_type in dict.fromkeys(problem_types):
        if problem_type in TASKS:
            resolved[problem_type] = TASKS.canonical(problem_type)
        else:
            close = TASKS.suggestions(problem_type, n=1)
            unknown.append(repr(problem_type) + (f" (did you mean {close[0]!r}?)" if close else ""))
    if unknown:
        raise UnknownTaskError(
            f"no reward task for problem_type {', '.join(unknown)}; known: {', '.join(TASKS.names())}. "
            "Register one with @register_task in a file listed in reward.task_files."
        )
    return resolved


def load_task_files(paths: Iterable[str]) -> None:
    """Import user task files so that their `@register_task` decorators run (idempotent)."""
    TASKS.names()  # the built-ins first, so that a user task clashing with one is refused
    load_plugin_files(paths, key="reward.task_files")


def load_callable(spec: str, default_name: str = "compute_score") -> Callable[..., Any]:
    """Load `"path/to/file.py:function"` (EasyR1 convention) or `"package.module:function"`; the
    function name defaults to `default_name`."""
    path, separator, name = spec.rpartition(":")
    if separator and not path.endswith(".py") and "/" not in path and "\\" not in path:
        function = getattr(importlib.import_module(path), name, None)
        if not callable(function):
            raise AttributeError(f"{path} has no callable {name!r}")
        return function
    if not separator or not path.endswith(".py"):
        path, name = spec, default_name
    module = load_plugin_file(path, key="reward file")
    function = getattr(module, name, None)
    if not callable(function):
        raise AttributeError(f"{path} has no callable {name!r}")
    return function
