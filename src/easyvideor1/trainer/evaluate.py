"""Validation: generate for held-out prompts, score with the reward library, aggregate by task.

With a video probe (``trainer.video_probe_every``, ``data/probe.py``) the prompts that have a
video are validated again with their frames blanked or shuffled; :func:`probe_summary` sets the
probed accuracy beside the real accuracy of the same prompts.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections import defaultdict

import torch

from ..outdir import make_dir, open_append, refuse_link
from ..rewards import score_records
from ..rollout.base import Prompt, Request, Responses
from ..rollout.config import PipelineSettings
from ..rollout.pipeline import run_pipeline
from ..rollout.sampling import SamplingConfig
from .distributed import DistState, all_gather, gather_in_group, own_random_stream


def validate_policy(
    engine,
    processor,
    dist: DistState,
    val_set,
    val_idx: list[int],
    sampling: SamplingConfig,
    cfg,
    step: int,
    probes: bool = False,
    tools=None,
) -> dict[str, float]:
    """Validation metrics of the policy behind ``engine`` on the prompts ``val_idx`` of
    ``val_set``; with ``probes``, also each ``trainer.video_probe`` run on the prompts that have a
    video, and its gap to the real accuracy. Each rank validates its slice with its own rollout
    engine; rank 0 writes the run as an eval output directory (``validation/step_<step>``) and
    appends a few generations to ``generations.jsonl``. With ``tools`` (a ToolSession) each
    prompt is an episode, as the rollouts are."""
    if not val_idx:
        return {}
    mine = val_idx[dist.rank :: dist.world]  # the ranks of a sequence-parallel group split theirs too

    def run(indices: list[int], probe: str | None = None) -> list[dict]:
        rows = evaluate(engine, processor, val_set, indices, sampling, cfg.reward, probe=probe, tools=tools)
        group = [g for part in gather_in_group(rows, dist) for g in part]
        return sorted((g for part in all_gather(group) for g in part), key=lambda g: g["index"])

    with own_random_stream(dist):  # a sequence-parallel group's shared generator stays in step
        generations = run(mine)
        metrics = summarize(generations)
        shown = list(generations[:8])
        if probes:  # every rank probes its own video prompts (all ranks take part in the gathers)
            with_video = [i for i in mine if has_video(val_set, i)]
            for probe in cfg.trainer.video_probe:
                probed = run(with_video, probe)
                metrics.update(probe_summary(generations, probed, probe))
                shown += [{**g, "probe": probe} for g in probed[:4]]
    if not dist.is_main:
        return metrics
    refuse_link(os.path.join(cfg.trainer.output_dir, VALIDATION_DIR))  # written into, never through
    out = str(make_dir(os.path.join(cfg.trainer.output_dir, VALIDATION_DIR, f"step_{step}")))
    write_validation_run(out, val_set, generations, cfg.reward)
    append_generations(cfg.trainer.output_dir, step, shown)
    return metrics


GENERATIONS_FILE = "generations.jsonl"


def append_generations(output_dir: str, step: int, shown: list[dict]) -> None:
    """Append the validation responses shown for ``step`` to ``<output_dir>/generations.jsonl``."""
    with open_append(os.path.join(output_dir, GENERATIONS_FILE)) as f:
        f.writelines(json.dumps({"step": step, **g}) + "\n" for g in shown)


@torch.no_grad()
def evaluate(
    engine,
    processor,
    dataset,
    indices: list[int],
    sampling: SamplingConfig,
    reward_cfg,
    batch_size: int = 16,
    probe: str | None = None,
    tools=None,
) -> list[dict]:
    """One row per prompt: the generation and its scores (aggregate rows with :func:`summarize`),
    through the pipeline ``eval`` and ``filter`` use (``rollout/pipeline.py``), media loaded in a
    thread (no fork beside a live model and process group).

    ``probe`` (``blank``/``shuffle``) blanks or shuffles every prompt's video frames as they load."""
    view = copy.copy(dataset)
    view.probe = probe  # its samples carry the probe; load_media applies it after the cache
    work = _ValidationWork(view, sampling, reward_cfg)
    rows: list[dict] = []
    settings = PipelineSettings(
        load_workers=0,
        queue_size=batch_size,
        max_in_flight=batch_size,
        score_workers=reward_cfg.judge.score_workers if reward_cfg is not None else 0,
    )
    run_pipeline(view, list(indices), engine, processor, work, rows.extend, settings, tools=tools)
    return sorted(rows, key=lambda g: g["index"])


@dataclasses.dataclass
class _ValidationWork:
    """Validation's part of the pipeline: one response per prompt, scored by the reward library as
    training scores rollouts; each row also keeps the response and its token count (the fields of
    eval's prediction rows)."""

    dataset: object
    sampling: SamplingConfig
    reward_cfg: object

    def request(self, i: int, prompt: Prompt) -> Request:
        return Request(f"val-{i}", prompt, self.sampling)

    def scored(self, i: int, out: Responses) -> dict:
        record = self.dataset.records[i]  # not dataset[i]: that locates the cache entries again
        n_tokens = int(out.mask[0].sum())
        (result,) = score_records(out.texts[:1], [record], [n_tokens], self.reward_cfg)
        return {
            "index": i,
            "problem_id": record.problem_id,
            "task": result["task"],
            "response": out.texts[0],
            "answer": record.answer,
            "output_tokens": n_tokens,
            "truncated": bool(out.truncated[0]) if out.truncated else None,
            **{k: float(result[k]) for k in ("overall", "accuracy", "format")},
            # the judge gave no verdict: kept with its reason, out of the validation means
            **(
                {"unscored": True, "not_scored_reason": result["judge_error"]}
                if result.get("judge_error")
                else {}
            ),
            # an episode (tools): its calls and tool turns
            **(
                {
                    "tool_calls": out.episodes[0].counts["calls"],
                    "tool_turns": out.episodes[0].tool_turns,
                    "calls": [c.row() for c in out.episodes[0].calls],
                }
                if out.episodes
                else {}
            ),
        }

    def failure(self, i: int, reason: str) -> dict:
        record = self.dataset.records[i]
        return {
            "index": i,
            "problem_id": record.problem_id,
            "task": str(record.problem_type or "unknown"),
            "response": None,
            "answer": record.answer,
            "error": reason,
            **{k: 0.0 for k in ("overall", "accuracy", "format")},
        }


VALIDATION_DIR = "validation"


def write_validation_run(out: str, dataset, generations: list[dict], reward_cfg) -> None:
    """The validation's responses as an ``eval`` output directory (``OUT/<file name>/predictions.jsonl``,
    ``results.json``, ``report.html``): each validation file is the benchmark ``eval --data FILE``
    makes of it (same name, sample ids and prompts), scored by ``eval``'s scoring half, so
    ``eval-compare`` sets a validation beside an ``eval`` run of the same checkpoint."""
    from ..evaluation.commands import score_responses
    from ..evaluation.identity import sample_ids
    from ..evaluation.inputs import BenchmarkInputs
    from ..evaluation.spec_file import records_benchmarks

    by_file: dict[str, list[dict]] = defaultdict(list)
    for g in generations:
        by_file[dataset.data_files[g["index"]]].append(g)
    inputs, given = [], {}
    for data_file, rows in by_file.items():
        spec = records_benchmarks([data_file], [], dataset.cfg.prompt_template)[0]
        everyone = [i for i, f in enumerate(dataset.data_files) if f == data_file]
        ids = dict(zip(everyone, sample_ids([dataset.records[i] for i in everyone], spec.name), strict=True))
        chosen = [g["index"] for g in rows]
        records = [dataset.records[i] for i in chosen]
        prompts = [spec.build_prompt(r, "direct") for r in records]
        inputs.append(BenchmarkInputs(spec, records, [ids[i] for i in chosen], prompts, data_file))
        given[spec.name] = {ids[g["index"]]: g for g in rows}
    score_responses(inputs, given, out, reward_cfg, quiet=True)


def summarize(generations: list[dict]) -> dict[str, float]:
    """``val/<key>`` and ``val/<task>/<key>`` means of the rows :func:`evaluate` returns."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    unscored = [g for g in generations if g.get("unscored")]
    for g in generations:
        if g.get("unscored"):
            continue
        for key in ("overall", "accuracy", "format"):
            sums[f"val/{key}"] += g[key]
            sums[f"val/{g['task']}/{key}"] += g[key]
        counts["all"] += 1
        counts[g["task"]] += 1
    metrics = {"val/unscored": float(len(unscored))} if unscored else {}
    for k, v in sums.items():
        parts = k.split("/")
        metrics[k] = v / counts["all" if len(parts) == 2 else parts[1]]
    episodes = [g for g in generations if "tool_calls" in g]
    if episodes:  # validation with tools: how often the policy calls one
        metrics["val/tool_call_rate"] = sum(1 for g in episodes if g["tool_calls"]) / len(episodes)
        metrics["val/tool_calls"] = sum(g["tool_calls"] for g in episodes) / len(episodes)
    return metrics


# metric names of each probe: the probed accuracy and the gap (real minus probed)
PROBE_METRICS = {
    "blank": ("accuracy_blank_video", "video_gap"),
    "shuffle": ("accuracy_shuffled_video", "video_gap_shuffled"),
}


def has_video(dataset, index: int) -> bool:
    """Whether validation prompt ``index`` shows a video (only those are probed)."""
    return bool(dataset.records[index].videos)


def probe_summary(real: list[dict], probed: list[dict], probe: str) -> dict[str, float]:
    """The probed accuracy and its gap to the real accuracy of the *same* prompts, overall
    (``val/accuracy_blank_video``, ``val/video_gap``) and per task (``val/<task>/...``, as
    :func:`summarize` names them). ``real`` rows are matched to ``probed`` rows by ``index``;
    prompts without a video are not probed, so they are in neither number. No probed rows: ``{}``."""
    acc_name, gap_name = PROBE_METRICS[probe]
    by_index = {g["index"]: g for g in real}
    # None: every probed prompt (a task may be called anything, "all" included)
    sums: dict[str | None, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])  # probed, real, count
    for g in probed:
        twin = by_index.get(g["index"])
        if twin is None:
            raise ValueError(f"probed validation row {g['index']} ({g['problem_id']}) has no real row")
        for group in (None, g["task"]):
            s = sums[group]
            s[0] += g["accuracy"]
            s[1] += twin["accuracy"]
            s[2] += 1
    metrics = {}
    for group, (acc, real_acc, n) in sums.items():
        prefix = "val" if group is None else f"val/{group}"
        metrics[f"{prefix}/{acc_name}"] = acc / n
        metrics[f"{prefix}/{gap_name}"] = (real_acc - acc) / n
    return metrics
