"""Evaluating one benchmark: its samples through the shared pipeline, resumable, failures counted.

The stages (media loaders -> prompt -> engine requests -> scoring -> rows) are
``rollout/pipeline.py``'s, shared with training validation and ``filter``; what is evaluation's
is here: the benchmark's prompts and sample ids, the settings digest, the benchmark's scorer, and
one JSON line per sample appended to ``predictions.jsonl`` and flushed. A rerun skips exactly the
samples already recorded under the same
settings digest (generation settings, frame budget, model *fingerprint*) with the same prompt; a
sample whose media cannot be loaded is recorded as a failure and counts as wrong.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from typing import Any

from ..data.config import DataConfig
from ..data.dataset import RecordDataset
from ..data.prompt import PromptTemplate
from ..outdir import make_dir, writing
from ..rewards import RewardConfig
from ..rollout.base import Prompt, Request, Responses
from ..rollout.pipeline import run_pipeline
from ..rollout.sampling import SamplingConfig
from ..tools import ToolsConfig
from ..tools.session import ToolSession
from .config import EvalConfig, digest_of
from .inputs import BenchmarkInputs
from .predictions import PredictionWriter, read_predictions
from .registry import BenchmarkSpec
from .report_html import thumbnail_strip
from .results import write_results
from .rows import failure_row, prompt_sha, scored_row

# data settings that change where frames come from, not which frames: not part of the digest
_DATA_NOT_HASHED = (
    "train_files",
    "val_files",
    "video_root",
    "cache_dir",
    "cache_mode",
    "decode_time_limit",
    "preflight",
)


def frame_settings(data: DataConfig) -> dict:
    """The data settings that decide which frames (and prompt) a sample gets: what a resume digest
    covers (where frames come from, e.g. the cache directory, is left out)."""
    return {k: v for k, v in dataclasses.asdict(data).items() if k not in _DATA_NOT_HASHED}


def settings_digest(
    settings: EvalConfig,
    spec: BenchmarkSpec,
    data: DataConfig,
    model_id: str,
    tools: ToolsConfig | None = None,
) -> str:
    return digest_of(
        {
            "eval": settings.generation_digest(spec.max_new_tokens),
            "data": frame_settings(data),
            "model": model_id,
            # with tools, which ones and their budgets decide the episodes (absent: one-turn rows)
            **({"tools": dataclasses.asdict(tools)} if tools is not None else {}),
        }
    )


def run_benchmark(
    inputs: BenchmarkInputs,
    engine,
    processor,
    data: DataConfig,
    settings: EvalConfig,
    out_dir: str,
    model_id: str,
    loader=None,
    reward: RewardConfig | None = None,
    tools: ToolsConfig | None = None,
) -> dict[str, Any]:
    """Evaluate one benchmark through the shared pipeline (``rollout/pipeline.py``); returns its
    results (also written to ``<out>/<name>/results.json``).

    ``model_id`` is :func:`~easyvideor1.evaluation.identity.model_fingerprint` of the weights.
    ``tools`` (enabled): every sample is an episode in which the policy may call them; its row
    records every turn and call, with a thumbnail strip of the frames each call returned."""
    t0 = time.perf_counter()
    spec = inputs.spec
    bench_dir = str(make_dir(os.path.join(out_dir, spec.name)))
    pred_path = os.path.join(bench_dir, "predictions.jsonl")
    tools = tools if tools is not None and tools.enabled else None
    digest = settings_digest(settings, spec, data, model_id, tools)
    dataset = RecordDataset(
        inputs.prompted(),
        eval_data_config(data, settings.style, spec.prompt),
        inputs.annotation_file,
        loader,
        probe=settings.probe,  # blanks/shuffles frames as the loaders load them (data/probe.py)
    )
    done = read_predictions(pred_path, digest).rows
    todo = [
        i
        for i, sid in enumerate(inputs.ids)
        if done.get(sid, {}).get("prompt_sha") != prompt_sha(inputs.prompts[i])
    ]
    max_new = settings.max_new_tokens or spec.max_new_tokens
    work = BenchmarkWork(inputs, settings.sampling(max_new_tokens=max_new), digest, reward)
    thumbs_path = os.path.join(bench_dir, "thumbs.jsonl")
    with _appending(pred_path) as out, _appending(thumbs_path) as thumbs:

        def keep_thumbnail(i: int, strip: str) -> None:  # for report.html (it never decodes a video again)
            with writing(thumbs_path):  # a full disk: one line naming the file (earlier rows stay)
                thumbs.write([{"sample_id": inputs.ids[i], "thumb": strip}])

        def keep_rows(rows: list[dict]) -> None:
            with writing(pred_path):
                out.write(rows)

        timing = run_pipeline(
            dataset,
            todo,
            engine,
            processor,
            work,
            keep_rows,
            dataclasses.replace(
                settings.pipeline(), score_workers=reward.judge.score_workers if reward else 0
            ),
            thumbnail_strip,
            keep_thumbnail,
            ToolSession(tools, data.model_family, loader) if tools is not None else None,
        )
    # what the digest stands for, readable: generation settings, engine, frame budget, model
    detail = {
        "eval": {**dataclasses.asdict(settings), "max_new_tokens": max_new},
        **({"tools": dataclasses.asdict(tools)} if tools is not None else {}),
        "frames": {
            k: v for k, v in dataclasses.asdict(data).items() if k.startswith(("video_", "image_", "model_"))
        },
        "model_fingerprint": model_id,
    }
    return write_results(
        inputs,
        pred_path,
        digest,
        bench_dir,
        time.perf_counter() - t0,
        {"load": timing.load, "generate": timing.generate},
        detail,
        reward,
        probe=settings.probe,
    )


@contextlib.contextmanager
def _appending(path: str) -> Iterator[PredictionWriter]:
    """A PredictionWriter whose open and close name ``path`` when they fail: the close flushes, so
    after a full disk it fails again, and its bare OSError would hide which file it was."""
    with writing(path):
        writer = PredictionWriter(path)
    try:
        yield writer
    finally:
        with writing(path):
            writer.close()


@dataclasses.dataclass
class BenchmarkWork:
    """Evaluation's part of the pipeline: one greedy (or configured) response per sample, scored by
    the benchmark's scorer into a ``predictions.jsonl`` row."""

    inputs: BenchmarkInputs
    sampling: SamplingConfig
    digest: str
    reward: RewardConfig | None

    def request(self, i: int, prompt: Prompt) -> Request:
        return Request(self.inputs.ids[i], prompt, self.sampling)

    def failure(self, i: int, error: str) -> dict:
        return failure_row(self.inputs.ids[i], i, self.digest, self.inputs.prompts[i], error)

    def scored(self, i: int, out: Responses) -> dict:
        return scored_row(
            self.inputs.spec,
            self.inputs.records[i],
            self.inputs.ids[i],
            i,
            self.digest,
            self.inputs.prompts[i],
            out.texts[0],
            output_tokens=int(out.mask[0].sum()),
            truncated=out.truncated[0] if out.truncated else None,
            reward=self.reward,
            episode=episode_row(out.episodes[0]) if out.episodes else None,
        )


def episode_row(episode) -> dict[str, Any]:
    """What a predictions row records of an episode: how it ended, its counts, and every policy
    turn with its calls (name, arguments, status, the result's text, a strip of its frames)."""
    calls = iter(episode.calls)
    turns = []
    for turn in episode.turns:
        rows = []
        for row in turn["calls"]:
            outcome = next(calls)
            thumb = (
                thumbnail_strip(outcome.result.videos, outcome.result.images)
                if outcome.result.frames
                else None
            )
            rows.append({**row, "thumb": thumb})
        turns.append({"text": turn["text"], "calls": rows})
    return {"finish": episode.finish, **episode.counts, "tool_turns": episode.tool_turns, "turns": turns}


def eval_data_config(data: DataConfig, style: str = "direct", prompt=None) -> DataConfig:
    """The prompt is already rendered; a thinking-template model (Qwen3.5) thinks as the prompt's
    template decides (:meth:`~easyvideor1.data.prompt.PromptTemplate.thinking`: a ``--data`` file's
    training template as in training), a benchmark's own prompt function in the ``thinking`` style
    only; ``data.thinking`` overrides both."""
    if isinstance(prompt, PromptTemplate):
        thinking = prompt.thinking(style, data.thinking)
    else:
        thinking = style == "thinking" if data.thinking is None else data.thinking
    return dataclasses.replace(data, prompt_template="none", thinking=thinking)
