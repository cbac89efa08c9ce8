"""Benchmarks defined outside the code: YAML spec files (``--benchmark-file``) and records files
evaluated as they are (``--data``).

A spec file names an annotation file in the unified/training records format, a Jinja prompt
template, a metric from the registry's aggregations and the record fields to break it down by::

    name: my_bench                 # becomes OUT/my_bench/ and the name in `eval --list`
    annotation: my_bench.jsonl     # relative to this YAML file's folder (or absolute)
    video_dir: my_bench_videos     # under --video-root (default: the root itself)
    metric: accuracy               # accuracy | macro_accuracy | miou | multi_binary | spatio_temporal
    macro_over: category           # macro_accuracy only: the field whose groups are averaged
    breakdowns: {by_task: problem_type, by_duration: duration}   # or a list: [duration] -> by_duration
    problem_type: multiple choice  # for records without one (selects the reward task / scorer)
    max_new_tokens: 512            # generation default (--max-new-tokens overrides)
    prompt: |                      # Jinja; default: the generic prompt (data/prompt.py `benchmark`)
      {{ question }} ...

Template variables are the prompt renderer's (``data/prompt.py``): ``question``, ``options``,
``instruction`` (the answer instruction of the record's reward task for the run's style, the text
training uses), ``style``, ``problem_type``, ``record`` (every field but the answer, which is
withheld so a template cannot leak it) and more. Scoring is the reward library's, per
``problem_type`` (as in training). Every mistake is an error naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from typing import Any

import yaml

from ..data.prompt import BENCHMARK_PROMPT, PromptError, PromptTemplate
from ..data.prompt import prompt_template as training_template
from ..data.records import Record
from ..errors import UserError
from ..registry import normalize_name
from .metrics import (
    Aggregation,
    macro_over,
    multi_binary,
    plain_accuracy,
    spatio_temporal,
    temporal_recall,
    with_breakdowns,
)
from .registry import BENCHMARKS, BenchmarkSpec, list_benchmarks, register_benchmark

_KEYS = {
    "name": "registry name (letters, digits, - _ .)",
    "annotation": "annotation file (JSON array or JSONL records)",
    "video_dir": "sub-directory of --video-root",
    "metric": "headline aggregation",
    "macro_over": "field averaged over (metric macro_accuracy)",
    "breakdowns": "list of fields, or {name: field}",
    "problem_type": "problem_type of records that lack one",
    "max_new_tokens": "default response length",
    "prompt": "Jinja template of the user text",
    "description": "free text shown nowhere but the file",
}
_RECORD_ATTRS = {f.name for f in dataclasses.fields(Record)} - {"extra"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class SpecFileError(UserError):
    """A benchmark spec file or records file that cannot be used; the message names file and key."""


def field_label(record: Record, name: str) -> str:
    """A record field's value as a breakdown label (``unknown`` when missing or empty)."""
    from .specs import label

    value = getattr(record, name) if name in _RECORD_ATTRS else record.extra.get(name)
    return label(value)


def _by(field: str) -> Callable[[Record], str]:
    return lambda rec: field_label(rec, field)


def _headline(metric: str, macro_field: str | None) -> Aggregation:
    if metric == "accuracy":
        return plain_accuracy()
    if metric == "macro_accuracy":
        return macro_over(_by(str(macro_field)), f"by_{macro_field}")
    if metric == "miou":
        return temporal_recall()
    return {"multi_binary": multi_binary, "spatio_temporal": spatio_temporal}[metric]


METRICS = {
    "accuracy": "accuracy",
    "macro_accuracy": "mean accuracy over groups",
    "miou": "mIoU",
    "multi_binary": "multi-binary accuracy",
    "spatio_temporal": "0.5 tIoU + 0.5 box IoU",
}


def aggregator(metric: str, breakdowns: dict[str, str], macro_field: str | None = None) -> Aggregation:
    """A registry aggregation plus accuracy breakdowns by record fields."""
    return with_breakdowns(_headline(metric, macro_field), **{name: _by(f) for name, f in breakdowns.items()})


def _fail(path: str, key: str, why: str) -> SpecFileError:
    return SpecFileError(f"{path}: key {key!r}: {why}")


def _breakdown_map(path: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return {f"by_{v}": v for v in value}
    if isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()
    ):
        return dict(value)
    raise _fail(path, "breakdowns", "must be a list of field names or a mapping {name: field}")


def load_spec_file(path: str) -> BenchmarkSpec:
    """The benchmark a YAML spec file defines (not registered; see :func:`register_spec_file`)."""
    if not os.path.isfile(path):
        raise SpecFileError(f"benchmark file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise SpecFileError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise SpecFileError(
            f"{path}: expected a mapping of keys ({', '.join(_KEYS)}), got {type(raw).__name__}"
        )
    unknown = sorted(set(map(str, raw)) - set(_KEYS))
    if unknown:
        raise _fail(path, unknown[0], f"unknown key; known keys: {', '.join(_KEYS)}")
    for key in ("name", "annotation"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise _fail(path, key, f"required: {_KEYS[key]}")
    name = raw["name"].strip().lower()
    if not _NAME.match(name):
        raise _fail(path, "name", f"{raw['name']!r}: use lower-case letters, digits, '-', '_' or '.'")
    for key in ("video_dir", "macro_over", "problem_type", "prompt", "description"):
        if key in raw and not isinstance(raw[key], str):
            raise _fail(path, key, f"must be text, got {type(raw[key]).__name__}")
    metric = raw.get("metric", "accuracy")
    if metric not in METRICS:
        raise _fail(path, "metric", f"{metric!r} is not one of {', '.join(METRICS)}")
    if (metric == "macro_accuracy") != bool(raw.get("macro_over")):
        raise _fail(path, "macro_over", "give it exactly when metric is macro_accuracy")
    tokens = raw.get("max_new_tokens", 1024)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise _fail(path, "max_new_tokens", f"must be a positive integer, got {tokens!r}")
    try:
        prompt = (
            PromptTemplate(raw["prompt"], f"{path}: key 'prompt'") if raw.get("prompt") else BENCHMARK_PROMPT
        )
    except PromptError as e:
        raise SpecFileError(str(e)) from None
    annotation = os.path.expanduser(raw["annotation"])
    if not os.path.isabs(annotation):
        annotation = os.path.join(os.path.dirname(os.path.abspath(path)), annotation)
    breakdowns = _breakdown_map(path, raw.get("breakdowns"))
    default_type = raw.get("problem_type")
    return BenchmarkSpec(
        name,
        os.path.normpath(annotation),
        raw.get("video_dir", ""),
        aggregator(metric, breakdowns, raw.get("macro_over")),
        adapt=(lambda r: r if r.problem_type else dataclasses.replace(r, problem_type=default_type))
        if default_type
        else None,
        breakdown_note=f"defined in {path}",
        prompt=prompt,
        max_new_tokens=tokens,
        metric=METRICS[metric],
        prompt_source=f"{path} (Jinja)" if raw.get("prompt") else f"{path} (generic template)",
        breakdown_fields=tuple(dict.fromkeys([*breakdowns.values(), *filter(None, [raw.get("macro_over")])])),
        origin=os.path.abspath(path),
    )


def register_spec_file(path: str) -> BenchmarkSpec:
    """Load and register ``path``'s benchmark (again from the same file: the registered one)."""
    spec = load_spec_file(path)
    if spec.name in BENCHMARKS:  # (the built-ins are loaded first, so a clash with one is seen)
        known = BENCHMARKS.get(spec.name)
        if known.origin == spec.origin:
            return known
        where = f"in {known.origin}" if known.origin else "built in"
        raise _fail(path, "name", f"{spec.name!r} is already a benchmark ({where})")
    return register_benchmark(spec)


def records_benchmarks(
    paths: list[str], group_by: list[str], prompt_template: str = "plain"
) -> list[BenchmarkSpec]:
    """One benchmark per records file (``--data``): named after the file, prompted with the training
    template ``prompt_template`` (so ``eval --data`` with a run's config renders what its validation
    rendered), scored by the reward library per ``problem_type``, accuracy broken down by
    ``problem_type`` and ``group_by``."""
    try:
        prompt = training_template(prompt_template)
    except (OSError, ValueError) as e:
        raise SpecFileError(f"data.prompt_template: {e}") from None
    specs, taken = [], {normalize_name(n) for n in list_benchmarks()}
    breakdowns = {"by_problem_type": "problem_type", **{f"by_{g}": g for g in group_by}}
    for path in paths:
        if not os.path.isfile(path):
            raise SpecFileError(f"--data: records file not found: {path}")
        stem = re.sub(r"[^a-z0-9_.-]+", "_", os.path.basename(path).split(".")[0].lower()) or "data"
        name, k = stem, 1
        # "videomme.jsonl" (or "MLVU_dev.jsonl", one spelling of mlvu-dev) must not pass for a built-in
        while normalize_name(name) in taken:
            k += 1
            name = f"{stem}-{k}"
        taken.add(normalize_name(name))
        specs.append(
            BenchmarkSpec(
                name,
                os.path.abspath(path),
                "",
                aggregator("accuracy", breakdowns),
                breakdown_note="accuracy by problem_type" + "".join(f", by {g}" for g in group_by),
                prompt=prompt,
                prompt_source=f"the training template {prompt_template!r} (data.prompt_template)",
                metric="accuracy",
                breakdown_fields=tuple(breakdowns.values()),
                origin=os.path.abspath(path),
            )
        )
    return specs


def check_breakdown_fields(spec: BenchmarkSpec, records: list[Record]) -> None:
    """A breakdown field no record has is a typo, not a breakdown with one "unknown" group (checked
    for run-time benchmarks; a built-in keeps its documented breakdown even on a file without it)."""
    if not spec.origin:
        return
    for name in spec.breakdown_fields:
        if not any(field_label(r, name) != "unknown" for r in records):
            raise SpecFileError(f"{spec.origin or spec.name}: breakdown field {name!r} is in no record")
