"""What ``easyvideor1 eval`` (and ``--list``, ``--dry-run``) and ``easyvideor1 score`` do.

Every command checks its benchmark names and annotation files before anything heavy starts: a
typo is an error in a second, not after a model has loaded.

- ``eval``: generate with a model and score (resumable; ``pipeline.py``).
- ``eval --dry-run``: no model, no video: writes ``OUT/B/prompts.jsonl``, the exact user text of
  every sample (media as ``<video>``/``<image>`` placeholders), with its ``sample_id``.
- ``score``: responses made elsewhere (JSONL rows ``{"sample_id", "response"}``, ids as in
  ``prompts.jsonl``) scored exactly as ``eval`` scores its own: same rows, same ``results.json``.

All three write one layout into ``--out`` (``results.json``, ``report.html``, a folder per
benchmark), replacing files of those names: a non-empty ``--out`` that none of them wrote is refused
unless ``--reuse-out`` asks to write there (``outdir.Reuse``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from ..data.config import DataConfig
from ..data.records import RecordError
from ..errors import UserError
from ..outdir import Reuse, hold, make_dir, replacing
from ..resolve import resolve_config
from ..rewards import RewardConfig
from ..rollout.config import RolloutConfig
from ..threads import CPUConfig
from ..tools.config import ToolsConfig
from .config import ANNOTATIONS_ENV, EvalConfig, digest_of
from .inputs import BenchmarkInputs
from .predictions import read_lines
from .registry import BenchmarkSpec, UnknownBenchmarkError, get_benchmark, list_benchmarks
from .report import interval_text, plot_scores, write_run_report, write_summary
from .results import scored_pairs, summarize, write_json_atomic, write_jsonl_atomic
from .rows import failure_row, scored_row
from .spec_file import SpecFileError, check_breakdown_fields, records_benchmarks, register_spec_file


class RunSections(Protocol):
    """The sections of the run configuration evaluation reads (a ``RunConfig`` has them; the root
    config imports ``evaluation.config``, so evaluation does not import it back)."""

    eval: EvalConfig
    data: DataConfig
    reward: RewardConfig
    tools: ToolsConfig
    rollout: RolloutConfig  # its vllm section configures eval.engine=vllm
    cpu: CPUConfig


class EvalInputError(UserError):
    """A benchmark name, annotation file or predictions file that cannot be used."""


# the commands that write an evaluation's --out (its .lock names the one that held it last)
OUTPUT_COMMANDS = ("eval", "eval --dry-run", "score")


def _reuse(reuse_out: bool) -> Reuse:
    """A non-empty --out that no evaluation wrote is refused unless ``reuse_out`` (``--reuse-out``)."""
    return Reuse(OUTPUT_COMMANDS, "--reuse-out", asked=reuse_out)


def resolve_benchmarks(settings: EvalConfig, prompt_template: str = "plain") -> list[BenchmarkSpec]:
    """The run's benchmarks: spec files (registered first, so ``--benchmarks`` may name them), the
    named benchmarks, then one benchmark per ``--data`` records file, prompted with the training
    template ``prompt_template`` (``data.prompt_template``), as trainer validation prompts it."""
    try:
        from_files = [register_spec_file(path) for path in settings.benchmark_files]
        data_specs = records_benchmarks(settings.data, settings.group_by, prompt_template)
    except SpecFileError as e:
        raise EvalInputError(str(e)) from None
    names = [n.strip() for n in settings.benchmarks if n.strip()]
    if not names and not settings.data and not from_files:
        raise EvalInputError(
            "no benchmarks given: --benchmarks NAME[,NAME...] (see `easyvideor1 eval --list`), "
            "--benchmark-file SPEC.yaml or --data RECORDS.jsonl"
        )
    specs, unknown = [], []
    for name in names:
        try:
            specs.append(get_benchmark(name))
        except UnknownBenchmarkError:
            unknown.append(name)
    if unknown:
        raise EvalInputError(
            f"unknown benchmark(s) {', '.join(map(repr, unknown))}; known: {', '.join(list_benchmarks())}"
        )
    # a spec file not named in --benchmarks is evaluated too: giving the file says "run it"
    specs += [s for s in from_files if s not in specs]
    return specs + data_specs


def annotation_dir(spec: BenchmarkSpec, settings: EvalConfig) -> str:
    """Where ``spec``'s annotation file lives (``synthetic``: the synth directory, i.e. the video root;
    spec files and ``--data`` files: their own absolute path)."""
    if os.path.isabs(spec.annotation):
        return os.path.dirname(spec.annotation)
    if spec.name == "synthetic":
        if not settings.video_root:
            raise EvalInputError(
                "benchmark 'synthetic' reads records.jsonl from --video-root (the synth dir)"
            )
        return settings.video_root
    found = settings.annotations_dir()
    if not found:
        raise EvalInputError(
            f"no annotation directory for {spec.name!r}: give --annotations DIR "
            f"(config key eval.annotations, or ${ANNOTATIONS_ENV})"
        )
    return found


def media_root(spec: BenchmarkSpec, settings: EvalConfig, data_root: str | None) -> str | None:
    """The directory ``spec``'s relative media paths start from: ``--video-root`` (plus the spec's
    ``video_dir``). A run-time benchmark (``--data``, spec file) may go without: its paths are then
    resolved as training resolves them, against ``data.video_root`` or else the file's own folder."""
    if settings.video_root:
        return os.path.join(settings.video_root, spec.video_dir)
    if not spec.origin:
        raise EvalInputError(
            f"no video root for {spec.name!r}: give --video-root DIR (config key eval.video_root)"
        )
    base = data_root or (os.path.dirname(spec.annotation) if spec.video_dir else None)
    return os.path.join(base, spec.video_dir) if base else None


def load_inputs(specs: list[BenchmarkSpec], settings: EvalConfig) -> list[BenchmarkInputs]:
    """Every benchmark's samples, after checking that every annotation file exists."""
    paths = {spec.name: os.path.join(annotation_dir(spec, settings), spec.annotation) for spec in specs}
    missing = [f"{name}: {path}" for name, path in paths.items() if not os.path.isfile(path)]
    if missing:
        raise EvalInputError("annotation file(s) not found:\n  " + "\n  ".join(missing))
    out = []
    for spec in specs:
        unreadable: list[RecordError] = []
        try:
            records = spec.load(os.path.dirname(paths[spec.name]), unreadable)
            check_breakdown_fields(spec, records)
        except (RecordError, SpecFileError) as e:
            raise EvalInputError(f"{spec.name}: {e}") from e
        for e in unreadable:  # damaged text is that record's problem, not the run's: named, counted
            print(f"{spec.name}: record left out: {e}", file=sys.stderr)
        out.append(BenchmarkInputs.build(spec, records, paths[spec.name], settings, len(unreadable)))
    return out


def benchmark_table(settings: EvalConfig) -> str:
    """``eval --list``: every benchmark, its annotation file, metric, judge, default length, file found."""
    root = settings.annotations_dir()
    try:
        for path in settings.benchmark_files:
            register_spec_file(path)
    except SpecFileError as e:
        raise EvalInputError(str(e)) from None
    lines = [
        f"annotations: {root or f'(not set: --annotations DIR, eval.annotations or ${ANNOTATIONS_ENV})'}",
        f"{'benchmark':<18} {'annotation file':<28} {'metric':<34} {'judge':<6} {'tokens':>6}  found",
    ]
    for name in list_benchmarks():
        spec = get_benchmark(name)
        if spec.name == "synthetic":
            found = "(in --video-root)"
        elif spec.origin:
            found = f"{'yes' if os.path.isfile(spec.annotation) else 'no'} ({os.path.basename(spec.origin)})"
        else:
            found = "yes" if root and os.path.isfile(os.path.join(root, spec.annotation)) else "no"
        judge = "yes" if spec.needs_judge else "no"
        lines.append(
            f"{spec.name:<18} {os.path.basename(spec.annotation):<28} {spec.metric:<34} {judge:<6} {spec.max_new_tokens:>6}  {found}"
        )
    return "\n".join(lines)


def evaluate(
    cfg: RunSections, model: str, out: str, served: tuple[Any, Any] | None = None, reuse_out: bool = False
) -> dict[str, dict]:
    """Run every benchmark of ``cfg.eval`` on checkpoint ``model``, with the engine of
    ``eval.engine`` (built after all checks; ``served``: an ``(engine, processor)`` pair built
    already, e.g. a test's). ``reuse_out``: write into a non-empty ``out`` no evaluation wrote."""
    from ..media.cache import VideoLoader
    from .identity import model_fingerprint
    from .pipeline import run_benchmark  # generation: only `eval` itself needs it

    settings = cfg.eval
    inputs = load_inputs(resolve_benchmarks(settings, cfg.data.prompt_template), settings)
    roots = {item.spec.name: media_root(item.spec, settings, cfg.data.video_root) for item in inputs}
    cfg = resolve_config(cfg, model)  # the checkpoint names the family; data.model_family checks it
    model_id = model_fingerprint(model)
    results: dict[str, dict] = {}
    # the cache directory is checked (cache_only: it must exist) before the model loads
    loader = VideoLoader(cfg.data.cache_dir, cfg.data.cache_mode, cfg.data.decode_time_limit)
    with hold(
        out, "--out", "eval", _reuse(reuse_out)
    ):  # two runs appending to one predictions.jsonl mix their rows
        engine, processor = served or serving_engine(cfg, model)
        try:
            for item in inputs:
                data = dataclasses.replace(cfg.data, video_root=roots[item.spec.name])
                res = run_benchmark(
                    item, engine, processor, data, settings, out, model_id, loader, cfg.reward, cfg.tools
                )
                results[item.spec.name] = res
                print(
                    f"{item.spec.name}: {_fmt(res['score'])} {res['metric']}, 95% CI {interval_text(res, _fmt)} "
                    f"({res['evaluated']}/{res['samples']} "
                    f"samples, {res['failures']} failures, {res['truncated']} truncated, "
                    f"{res['not_scored']} not scored)"
                )
        finally:
            engine.close()
        write_summary(results, out)
        plot_scores(results, out)
        print(f"report: {write_run_report(out, inputs, results, cfg.reward)}")
    return results


def serving_engine(cfg: RunSections, model: str) -> tuple[Any, Any]:
    """``(engine, processor)`` of ``eval.engine`` serving ``model`` (``rollout.vllm`` configures
    vLLM), with this process's threads chosen first (the media loaders keep their cores)."""
    from .. import threads
    from ..rollout.engines import load_engine

    threads.apply(explicit=cfg.cpu.threads, reserved=cfg.eval.load_workers)
    return load_engine(
        model, cfg.eval.engine, cfg.eval.dtype, cfg.rollout.vllm, max_batch=cfg.eval.batch_size
    )


def _fmt(score: float | None) -> str:
    return "not measured" if score is None else f"{score:.4f}"


def dry_run(cfg: RunSections, out: str, reuse_out: bool = False) -> dict[str, str]:
    """Write ``OUT/B/prompts.jsonl`` for every benchmark; loads no model and decodes no video."""
    written = {}
    settings = cfg.eval
    inputs = load_inputs(resolve_benchmarks(settings, cfg.data.prompt_template), settings)
    with hold(out, "--out", "eval --dry-run", _reuse(reuse_out)):
        for item in inputs:
            path = os.path.join(make_dir(os.path.join(out, item.spec.name)), "prompts.jsonl")
            with replacing(path) as f:
                f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in item.prompt_rows())
            written[item.spec.name] = path
            print(f"{item.spec.name}: {len(item.records)} prompts -> {path}")
    return written


def _responses(files: list[str], names: list[str]) -> tuple[dict[str, dict[str, dict]], int]:
    """Rows of the predictions files by benchmark (a row names its ``benchmark`` when several are
    scored), and how many lines were skipped (each reported on stderr with its reason). Two rows of
    one sample with different responses are refused (which one is meant cannot be known); a
    repeated identical row is taken once."""
    by_bench: dict[str, dict[str, dict]] = {n: {} for n in names}
    where: dict[tuple[str, str], str] = {}  # (benchmark, sample id) -> the line its row came from
    skipped = 0
    for path in files:
        # not only regular files: a pipe (``--predictions <(jq ...)``) is read like one
        if not os.path.exists(path):
            raise EvalInputError(f"predictions file not found: {path}")
        if os.path.isdir(path):
            raise EvalInputError(f"predictions file {path} is a directory (expected JSONL)")
        lineno = 0
        for lineno, row, why in read_lines(path):
            if row is not None and not isinstance(_response(row), str):
                why = "not a JSON object with string 'sample_id' and 'response'"
            elif row is not None:
                bench = row.get("benchmark") or (names[0] if len(names) == 1 else None)
                if bench not in by_bench:
                    why = "names no 'benchmark'" if bench is None else f"is for benchmark {bench!r}"
            if why:
                skipped += 1
                print(f"{path}: line {lineno} skipped: {why}", file=sys.stderr)
                continue
            sid, response = row["sample_id"], _response(row)
            if sid in by_bench[bench] and _response(by_bench[bench][sid]) != response:
                raise EvalInputError(
                    f"{path}: line {lineno}: sample {sid!r} of {bench} has another response at "
                    f"{where[bench, sid]}; keep one row per sample"
                )
            by_bench[bench][sid] = row
            where[bench, sid] = f"{path}: line {lineno}"
        if lineno == 0:  # scoring nothing would report every sample as a failure
            raise EvalInputError(f"predictions file {path}: no rows (the file is empty)")
    return by_bench, skipped


def _response(row: dict):
    return row.get("response", row.get("prediction"))


def score(cfg: RunSections, predictions: list[str], out: str, reuse_out: bool = False) -> dict[str, dict]:
    """Score responses made elsewhere; writes each benchmark's predictions.jsonl and results.json."""
    settings = cfg.eval
    inputs = load_inputs(resolve_benchmarks(settings, cfg.data.prompt_template), settings)
    given, skipped = _responses(predictions, [i.spec.name for i in inputs])
    with hold(out, "--out", "score", _reuse(reuse_out)):
        return score_responses(inputs, given, out, cfg.reward, skipped)


def _run_jobs(jobs: list, workers: int) -> list[dict]:
    """Each job's row, in order: rows as they are, callables called (in ``workers`` threads)."""
    if not workers:
        return [job() if callable(job) else job for job in jobs]
    with ThreadPoolExecutor(workers, thread_name_prefix="score") as pool:
        futures = [pool.submit(job) if callable(job) else job for job in jobs]
        return [f.result() if isinstance(f, Future) else f for f in futures]


def score_responses(
    inputs: list[BenchmarkInputs],
    given: dict[str, dict[str, dict]],
    out: str,
    reward: RewardConfig | None,
    skipped: int = 0,
    quiet: bool = False,
) -> dict[str, dict]:
    """The scoring half of ``eval``: responses (``given[benchmark][sample_id]`` rows with
    ``response``, ``output_tokens``, ``truncated``) scored by each benchmark's scorer into
    ``OUT/<benchmark>/predictions.jsonl`` and ``results.json``, the run's ``results.json`` and
    ``report.html``. ``score`` and training validation write their directories with it, so
    ``eval-compare`` sets either beside an ``eval`` run."""
    results = {}
    for item in inputs:
        rows_in = given.get(item.spec.name, {})
        unknown = set(rows_in) - set(item.ids)
        digest = "score:" + digest_of(sorted(rows_in))
        jobs = []  # a row, or how to score one (in threads when a judge scores: its requests overlap)
        for i, (rec, sid, prompt) in enumerate(zip(item.records, item.ids, item.prompts, strict=True)):
            row = rows_in.get(sid)
            if row is None:
                jobs.append(failure_row(sid, i, digest, prompt, "no response in the predictions file"))
                continue
            if row.get("error") is not None and row.get("response") is None:  # generation failed there
                jobs.append(failure_row(sid, i, digest, prompt, str(row["error"])))
                continue
            jobs.append(
                functools.partial(
                    scored_row,
                    item.spec,
                    rec,
                    sid,
                    i,
                    digest,
                    prompt,
                    _response(row),
                    output_tokens=row.get("output_tokens"),
                    truncated=row.get("truncated"),
                    reward=reward,
                )
            )
        rows = _run_jobs(jobs, reward.judge.score_workers if reward is not None else 0)
        bench_dir = str(make_dir(os.path.join(out, item.spec.name)))
        # replaced whole: scoring is a pure function of the file, never a mix of two scorings
        write_jsonl_atomic(os.path.join(bench_dir, "predictions.jsonl"), rows)
        res = summarize(item, scored_pairs(item, {r["sample_id"]: r for r in rows}, reward), skipped)
        res.update(settings=digest, unknown_sample_ids=len(unknown))
        write_json_atomic(os.path.join(bench_dir, "results.json"), res)
        results[item.spec.name] = res
        if not quiet:
            print(
                f"{item.spec.name}: {_fmt(res['score'])} {res['metric']}, 95% CI {interval_text(res, _fmt)} "
                f"({res['failures']} missing or failed, "
                f"{len(unknown)} unknown ids ignored)"
            )
    write_summary(results, out)
    report = write_run_report(out, inputs, results, reward)
    if not quiet:
        print(f"report: {report}")
    return results
