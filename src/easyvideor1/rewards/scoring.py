"""The dispatcher: one record in, one reward dict out, for training rollouts and evaluation alike.

`overall = w_acc * accuracy + w_fmt * format` (the overlong penalty is the trainer's reward shaping,
`algorithms/shaping.py`). An exception inside a task is not
turned silently into a zero: the result carries an `error` key ("ExceptionType: message") with zero
scores, the module-level counters (`error_counts()`) grow, and the first error of each kind is
logged with its traceback. `RewardConfig.strict` re-raises instead.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import sys
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from easyvideor1.rewards.config import RewardConfig
from easyvideor1.rewards.judge_scoring import JudgeFailed, judge_results
from easyvideor1.rewards.parsing import has_reasoning
from easyvideor1.rewards.registry import load_callable, load_task_files, resolve_task, weights_for
from easyvideor1.rewards.sample import Sample, TaskScore

logger = logging.getLogger("easyvideor1.rewards")

_DEFAULT_CONFIG = RewardConfig()
_RECORD_KEYS = ("response", "ground_truth", "problem_type", "options")
_error_counts: Counter[str] = Counter()
_logged_error_kinds: set[tuple[str, str]] = set()
_error_lock = threading.Lock()


def compute_score(
    response: str,
    ground_truth: Any,
    problem_type: str,
    options: Sequence[str] | None = None,
    *,
    config: RewardConfig | None = None,
    **meta: Any,
) -> dict[str, Any]:
    """Score one response.

    Args:
        response: the decoded response, as generated.
        ground_truth: the record's answer (`<answer>X</answer>`, bare text, or JSON text).
        problem_type: task name or alias, any spelling ("multiple choice", "stvg", "REC", ...).
        options: multiple-choice options ("A. ..."), if any.
        config: reward configuration (defaults: `RewardConfig()`).
        **meta: any other record field: `response_length` (tokens), `box_format`, `width`, `height`, `test_cases`, ...

    Returns:
        `overall`, `accuracy`, `format`, `task` (canonical name), `prediction` (the answer read from
        the response, None if none was found), task details, and `error` when the task raised.

    Raises:
        UnknownTaskError: for a problem type no task handles (validate at start-up instead).
    """
    item = {
        "response": response,
        "ground_truth": ground_truth,
        "problem_type": problem_type,
        "options": options,
    }
    result = score_items([{**meta, **item}], config or _DEFAULT_CONFIG)[0]
    record_errors([result])
    return result


def score_items(items: Sequence[Mapping[str, Any]], config: RewardConfig) -> list[dict[str, Any]]:
    """Score records in this process, without counting errors (callers count them once)."""
    if config.reward_function:
        return _score_with_custom_function(items, config)
    load_task_files(config.task_files)
    return [score_item(item, config) for item in items]


def score_item(item: Mapping[str, Any], config: RewardConfig) -> dict[str, Any]:
    """Score one record dict (`response`, `ground_truth`, `problem_type`, `options`, other fields)."""
    spec = resolve_task(item["problem_type"])
    meta = {key: value for key, value in item.items() if key not in _RECORD_KEYS}
    response = item.get("response")
    sample = Sample(
        response=response if isinstance(response, str) else ("" if response is None else str(response)),
        ground_truth=item.get("ground_truth"),
        task=spec.name,
        problem_type=str(item["problem_type"]),
        options=coerce_options(item.get("options")),
        meta=meta,
        config=config,
    )
    weights = weights_for(config, spec.name)
    try:
        score = spec.function(sample)
        accuracy = float(score.accuracy)
        if not math.isfinite(accuracy):
            raise ValueError(f"task {spec.name} returned a non-finite accuracy {accuracy}")
        accuracy = min(1.0, max(0.0, accuracy))
    except JudgeFailed as failure:  # a callable judge gave no verdict: unscored, not a 0
        result = {"overall": 0.0, "accuracy": 0.0, "format": 0.0, "task": spec.name, "prediction": None}
        result.update(judge_error=str(failure), unscored=True)
    except Exception as error:
        if config.strict:
            raise
        _log_task_error(spec.name, error)
        result = {"overall": 0.0, "accuracy": 0.0, "format": 0.0, "task": spec.name, "prediction": None}
        result["error"] = f"{type(error).__name__}: {error}"
    else:
        format_score = score_format(sample, score)
        result = {
            "overall": weights.accuracy * accuracy + weights.format * format_score,
            "accuracy": accuracy,
            "format": format_score,
            "task": spec.name,
            "prediction": score.prediction,
            **score.details,
        }
    return result


def score_format(sample: Sample, score: TaskScore) -> float:
    """1 for one well-shaped non-empty `<answer>`, 0.5 when malformed or hedged, 0 without a tag.

    With `require_think`, a response without a non-empty reasoning block before its answer gets 0.
    """
    answer = sample.answer
    if answer.source != "answer_tag":
        return 0.0
    if sample.config.require_think and not has_reasoning(sample.response):
        return 0.0
    if answer.ambiguous or score.well_formed is False:
        return 0.5
    return 1.0


def coerce_options(options: Any) -> list[str] | None:
    """Options as a list of strings; accepts lists, JSON/Python list strings, and None/"None"/"[]"."""
    if options is None:
        return None
    if isinstance(options, str):
        text = options.strip()
        if text in ("", "None", "null", "[]"):
            return None
        try:
            options = json.loads(text)
        except ValueError:
            try:
                options = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                return None
    if not isinstance(options, (list, tuple)) or not options:
        return None
    return [str(option) for option in options]


def _score_with_custom_function(
    items: Sequence[Mapping[str, Any]], config: RewardConfig
) -> list[dict[str, Any]]:
    """EasyR1 convention: the user's function scores whole records (`REWARD_TYPE` batch or sequential)."""
    function = load_callable(config.reward_function or "")
    module = sys.modules.get(getattr(function, "__module__", ""), None)
    kwargs = dict(config.reward_function_kwargs)
    inputs = [dict(item) for item in items]
    if getattr(module, "REWARD_TYPE", "sequential") == "batch":
        try:
            outputs = list(function(inputs, **kwargs))
            if len(outputs) != len(inputs):
                raise ValueError(
                    f"batch reward function returned {len(outputs)} results for {len(inputs)} inputs"
                )
            return [_check_custom_output(output) for output in outputs]
        except Exception as error:
            if config.strict:
                raise
            _log_task_error("custom", error)
            return [_custom_error(error) for _ in inputs]
    results = []
    for reward_input in inputs:
        try:
            results.append(_check_custom_output(function(reward_input, **kwargs)))
        except Exception as error:
            if config.strict:
                raise
            _log_task_error("custom", error)
            results.append(_custom_error(error))
    return results


def _check_custom_output(output: Any) -> dict[str, Any]:
    if not isinstance(output, Mapping) or not isinstance(output.get("overall"), (int, float)):
        raise TypeError(f"a reward function must return a dict with a numeric 'overall', got {output!r:.200}")
    return {"task": "custom", **output}


def _custom_error(error: Exception) -> dict[str, Any]:
    return {
        "overall": 0.0,
        "accuracy": 0.0,
        "format": 0.0,
        "task": "custom",
        "error": f"{type(error).__name__}: {error}",
    }


def _log_task_error(task: str, error: Exception) -> None:
    kind = (task, type(error).__name__)
    with _error_lock:
        first = kind not in _logged_error_kinds
        _logged_error_kinds.add(kind)
    if first:
        logger.warning(
            "reward task %s raised %s (first of its kind; later ones at DEBUG)", task, kind[1], exc_info=error
        )
    else:
        logger.debug("reward task %s raised %r", task, error)


def record_errors(results: Sequence[Mapping[str, Any]]) -> int:
    """Add the errors among `results` to the module counters; returns how many there were."""
    failed = [str(result.get("task")) for result in results if "error" in result]
    if failed:
        with _error_lock:
            _error_counts.update(failed)
    return len(failed)


def error_counts() -> dict[str, int]:
    """Task name -> number of results that carried an `error` since start (or the last reset)."""
    with _error_lock:
        return dict(_error_counts)


def reset_error_counts() -> None:
    """Zero the error counters (e.g. at the start of an evaluation); the next error of each kind is logged again."""
    with _error_lock:
        _error_counts.clear()
        _logged_error_kinds.clear()


# compute_score's own parameters: a record field with one of these names must not reach it twice
_SCORE_ARGUMENTS = frozenset(
    {"response", "ground_truth", "problem_type", "options", "config", "response_length"}
)


def record_item(response: str, record: Any, response_length: int | None = None) -> dict[str, Any]:
    """The scoring input of a response to a record (anything with ``answer``, ``problem_type``,
    ``options`` and ``extra``). Record fields reach the task as metadata, except those named like
    ``compute_score``'s own parameters."""
    meta = {k: v for k, v in record.extra.items() if k not in _SCORE_ARGUMENTS}
    if getattr(record, "problem", None):  # what a judge is told the question was
        meta.setdefault("question", record.problem)
    if response_length is not None:
        meta["response_length"] = response_length
    item = {
        "response": response,
        "ground_truth": record.answer,
        "problem_type": record.problem_type,
        "options": record.options,
    }
    return {**meta, **item}


def score_record(
    response: str, record: Any, *, config: RewardConfig | None = None, response_length: int | None = None
) -> dict[str, Any]:
    """Score a response against a record: evaluation's per-row call (training scores whole batches
    with ``batch.score_records``, which builds the same items)."""
    config = config or _DEFAULT_CONFIG
    items = [record_item(response, record, response_length)]
    results = score_items(items, config)
    judge_results(items, results, config)
    record_errors(results)
    return results[0]
