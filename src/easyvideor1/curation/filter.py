"""``easyvideor1 filter``: sample every record n times, score, keep the records in a pass-rate band.

The stages are the shared pipeline's (``rollout/pipeline.py``, as in evaluation and training
validation): loaders read each record's media ahead of generation; each record is one engine
request for its n responses with its own seed (``sampler.py``: so a resumed run samples what an
uninterrupted one would); the reward library scores them as training does (the record's task
decides the scorer); one JSON line per record is appended to ``OUT/responses.jsonl`` and flushed. After SIGKILL a rerun reads
that file (a torn last line is skipped), reuses the records recorded under the same settings
digest (model fingerprint, n, sampling, seed, engine, frame settings, prompt template) and samples
the rest; ``outputs.py`` then writes every result from the file alone, so a resumed run's outputs
equal an uninterrupted run's. A record whose media cannot be loaded is recorded with its reason
and sampled again by the next run (it may have been fixed); the job goes on.

Prompts are the *training* prompts (``data.prompt_template``, default ``plain``): the point is how
the model does on the questions it would be trained on.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..data.config import DataConfig
from ..data.dataset import RecordDataset
from ..data.prompt import format_question
from ..errors import ConfigError
from ..evaluation.config import digest_of
from ..evaluation.pipeline import frame_settings
from ..evaluation.predictions import PredictionWriter, read_predictions
from ..evaluation.rows import prompt_sha, reward_digest
from ..media.cache import VideoLoader
from ..rewards import RewardConfig, score_records
from ..rollout.base import Prompt, Request, Responses
from ..rollout.config import PipelineSettings
from ..rollout.engines import engine_names
from ..rollout.pipeline import run_pipeline
from ..rollout.sampling import SamplingConfig
from .inputs import InputFile, InputRecord
from .passes import Band, PassRule
from .sampler import Sampled, record_seed

RESPONSES = "responses.jsonl"


@dataclass
class FilterSettings(SamplingConfig):
    """How records are sampled and judged (flags of ``easyvideor1 filter``).

    The sampling keys are :class:`~easyvideor1.rollout.sampling.SamplingConfig`'s, defaulting to
    the run's ``rollout`` section (training rollouts' sampling).

    Attributes:
        n: Responses sampled per record.
        seed: Run seed; each record's seed derives from it and the record's id.
        keep: Kept pass-rate band ``LO:HI``, inclusive (``passes.py``).
        pass_threshold: ``X`` or ``TASK=X`` items (``passes.py``); empty = per-task defaults.
        engine: ``hf`` (one ``generate`` per record) or ``vllm`` (``AsyncLLM``).
        dtype: Weights dtype of either engine.
        load_workers: Media loader processes.
        queue_size: Loaded records waiting for the engine (bounds memory).
        max_in_flight: vLLM: records submitted at once.
    """

    SECTION: ClassVar[str] = "filter"

    n: int = 8
    seed: int = 0
    keep: str = "0.1:0.9"
    pass_threshold: list[str] = field(default_factory=list)
    engine: str = "hf"
    dtype: str = "float32"
    load_workers: int = 2
    queue_size: int = 8
    max_in_flight: int = 64

    def __post_init__(self) -> None:
        self.check_sampling()
        if self.max_new_tokens is None:
            raise ConfigError("filter.max_new_tokens: must be set (default: rollout.max_new_tokens)")
        for key in ("n", "load_workers", "queue_size", "max_in_flight"):
            if getattr(self, key) < 1:
                raise ConfigError(f"filter {key}: must be at least 1, got {getattr(self, key)}")
        if self.engine not in engine_names():
            raise ConfigError(f"filter engine: {self.engine!r} is not one of {', '.join(engine_names())}")
        self.band, self.rule = Band.parse(self.keep), PassRule.parse(self.pass_threshold)

    def pipeline(self) -> PipelineSettings:
        return PipelineSettings(self.load_workers, self.queue_size, self.max_in_flight)

    def generation(self) -> dict[str, Any]:
        """What decides the responses (the digest's part from these settings). Sampled responses
        depend on the engine's random streams, so the engine is part of it unless decoding is greedy
        (greedy predictions are engine-independent, as evaluation tests)."""
        keys = ("n", "temperature", "top_p", "top_k", "max_new_tokens", "seed")
        out = {k: getattr(self, k) for k in keys}
        if self.temperature > 0:
            out["engine"] = self.engine
        return out


def settings_digest(settings: FilterSettings, data: DataConfig, model_id: str) -> str:
    """Model fingerprint + generation + frame settings (where frames come from is left out, as in eval)."""
    return digest_of({"filter": settings.generation(), "data": frame_settings(data), "model": model_id})


@dataclass
class FilterWork:
    """Curation's part of the pipeline: ``n`` seeded responses per record, scored by the reward
    library into a ``responses.jsonl`` row."""

    items: list[InputRecord]
    settings: FilterSettings
    digest: str
    reward: RewardConfig
    prompts: list[str]

    def request(self, i: int, prompt: Prompt) -> Request:
        key = f"filter-{self.items[i].sample_id}"
        seed = record_seed(self.settings.seed, str(self.items[i].sample_id))
        return Request(key, prompt, self.settings.sampling(), n=self.settings.n, seed=seed)

    def failure(self, i: int, error: str) -> dict:
        return {
            "sample_id": self.items[i].sample_id,
            "settings": self.digest,
            "prompt_sha": prompt_sha(self.prompts[i]),
            "failed": True,
            "error": error,
        }

    def scored(self, i: int, responses: Responses) -> dict:
        out = Sampled.of(responses)
        rec = self.items[i].record
        row = {
            "sample_id": self.items[i].sample_id,
            "settings": self.digest,
            "prompt_sha": prompt_sha(self.prompts[i]),
            "failed": False,
            "responses": out.texts,
            "output_tokens": out.tokens,
            "truncated": out.truncated,
        }
        return score_row(row, rec, self.reward)


def score_row(row: dict, record, reward: RewardConfig) -> dict:
    """``row`` with each response's reward (``overall``, ``accuracy``, ``format``, ``task``, the
    extracted ``prediction``, ``error`` if the task raised), scored as training scores."""
    n = len(row["responses"])
    results = score_records(row["responses"], [record] * n, row["output_tokens"], reward)
    keep = ("overall", "accuracy", "format", "task", "prediction", "error", "unscored", "judge_error")
    scores = [{k: r[k] for k in keep if k in r} for r in results]
    return {**row, "scores": scores, "scoring": reward_digest(reward)}


def to_sample(
    files: list[InputFile], data: DataConfig, settings: FilterSettings, out_dir: str, model_id: str
) -> tuple[list[InputRecord], list[str], list[int]]:
    """The usable records, their prompts, and the indices of those ``OUT/responses.jsonl`` lacks
    (not recorded under this digest, recorded as failed, or recorded for another prompt)."""
    done = read_predictions(os.path.join(out_dir, RESPONSES), settings_digest(settings, data, model_id)).rows
    items = [item for f in files for item in f.items if item.record is not None]
    prompts = [format_question(item.record, data.prompt_template) for item in items]
    todo = [
        i
        for i, item in enumerate(items)
        if (row := done.get(item.sample_id)) is None
        or row.get("failed")
        or row.get("prompt_sha") != prompt_sha(prompts[i])
    ]
    return items, prompts, todo


def run_filter(
    files: list[InputFile],
    data: DataConfig,
    reward: RewardConfig,
    settings: FilterSettings,
    out_dir: str,
    model_id: str,
    engine,
    processor,
    loader: VideoLoader | None = None,
) -> dict[str, Any]:
    """Sample what ``OUT/responses.jsonl`` lacks; returns ``records``, ``sampled`` (now), ``reused``, ``seconds``."""
    t0 = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, RESPONSES)
    digest = settings_digest(settings, data, model_id)
    items, prompts, todo = to_sample(files, data, settings, out_dir, model_id)
    loader = loader or VideoLoader(data.cache_dir, data.cache_mode, data.decode_time_limit)
    dataset = RecordDataset([item.record for item in items], data, [item.file for item in items], loader)
    work = FilterWork(items, settings, digest, reward, prompts)
    print(f"filter: {len(items) - len(todo)} of {len(items)} records already sampled; {len(todo)} to go")
    written = [0]

    with PredictionWriter(path) as out:

        def write(rows: list[dict]) -> None:
            out.write(rows)
            for _ in rows:
                written[0] += 1
                _progress(written[0], len(todo))

        pipeline = dataclasses.replace(settings.pipeline(), score_workers=reward.judge.score_workers)
        run_pipeline(dataset, todo, engine, processor, work, write, pipeline)
    return {
        "records": len(items),
        "sampled": len(todo),
        "reused": len(items) - len(todo),
        "seconds": time.perf_counter() - t0,
    }


def _progress(k: int, total: int) -> None:
    if total and (k == total or k % max(1, total // 20) == 0):
        print(f"filter: {k}/{total} records sampled", file=sys.stderr, flush=True)
