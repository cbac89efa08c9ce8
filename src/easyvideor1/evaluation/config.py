"""``EvalConfig``: the ``eval`` section of the run configuration.

``easyvideor1 eval`` reads the same :class:`~easyvideor1.config.RunConfig` as training, so
``config=run.yaml`` brings the run's ``data`` (frame budget, cache), ``reward`` (judge, task files,
``require_think``) and ``model.path`` along; the ``eval`` flags are shortcuts for the keys below.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import ClassVar

from ..data.probe import PROBES
from ..errors import UserError
from ..rollout.config import PipelineSettings
from ..rollout.engines import engine_names
from ..rollout.sampling import SamplingConfig

ANNOTATIONS_ENV = "EASYVIDEOR1_ANNOTATIONS"


class EvalConfigError(UserError):
    """A setting of the ``eval`` section that cannot work; the message names the key."""


@dataclass
class EvalConfig(SamplingConfig):
    """How benchmarks are evaluated.

    The sampling keys are :class:`~easyvideor1.rollout.sampling.SamplingConfig`'s (greedy by
    default); vLLM engine settings are the run's ``rollout.vllm`` section, as in training.

    Attributes:
        benchmarks: Registry names (``easyvideor1 eval --list``).
        annotations: Directory of the benchmarks' unified annotation files. Default: the
            ``EASYVIDEOR1_ANNOTATIONS`` environment variable. (``synthetic`` reads ``video_root``.)
        video_root: Root of the benchmarks' videos; each benchmark reads its own sub-directory.
        style: ``direct`` (answer only) or ``thinking`` (brief reasoning, then the answer).
        max_new_tokens: Response length limit; ``None`` uses each benchmark's own default.
        temperature / top_p / top_k / min_new_tokens / presence_penalty: Sampling (``0``
            temperature = greedy). With a training run's config (``config=run.yaml``) and only
            records files (``data``), the keys not set here default to the run's validation
            sampling (``rollout.max_new_tokens``, ``val_temperature``, ``top_p``, ``top_k``,
            ``min_new_tokens``, ``presence_penalty``), so ``eval`` answers as validation did.
        preset: Named settings applied before explicit flags (``qwen3vl-official``, ``greedy``).
        engine: ``hf`` (batched ``generate``) or ``vllm`` (``AsyncLLM``, one request per sample).
        batch_size: HF engine: samples per ``generate`` call.
        load_workers: Processes loading media (cache entries or decoding) ahead of generation.
        queue_size: Loaded samples waiting for the engine (bounds memory on long videos).
        max_samples: Evaluate only the first N samples of each benchmark.
        max_in_flight: vLLM engine: requests submitted at once.
        dtype: ``float32`` or ``bfloat16`` (both engines).
        data: Records files in the training format, each evaluated as a benchmark of its own
            (named after the file; scored by the reward library per ``problem_type``), prompted
            with the training template ``data.prompt_template`` exactly as trainer validation
            prompts it (``thinking`` style asks the ``plain`` template to reason first).
        group_by: Record fields whose values break the ``data`` files' accuracy down
            (``by_<field>`` in ``results.json``), besides ``problem_type``.
        benchmark_files: YAML benchmark specs registered at run time (``spec_file.py``).
        probe: ``blank`` or ``shuffle``: evaluate with every video's frames blanked (mid-grey) or
            shuffled in time (``data/probe.py``; images and text untouched) to measure how much
            the model uses the video. Part of the settings digest, so a probed run never resumes
            from (or mixes with) real-video predictions; ``results.json`` says ``probe``. Compare
            with the real run: ``easyvideor1 eval-compare REAL_OUT PROBE_OUT``.
    """

    SECTION: ClassVar[str] = "eval"

    temperature: float = 0.0
    max_new_tokens: int | None = None
    benchmarks: list[str] = field(default_factory=list)
    annotations: str | None = None
    video_root: str | None = None
    style: str = "direct"
    preset: str | None = None
    engine: str = "hf"
    batch_size: int = 4
    load_workers: int = 2
    queue_size: int = 8
    max_samples: int | None = None
    max_in_flight: int = 64
    dtype: str = "float32"
    data: list[str] = field(default_factory=list)
    group_by: list[str] = field(default_factory=list)
    benchmark_files: list[str] = field(default_factory=list)
    probe: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def bad(key: str, why: str) -> None:
            raise EvalConfigError(f"eval.{key}: {why}")

        self.check_sampling()
        if self.style not in ("direct", "thinking"):
            bad("style", f"{self.style!r} is not one of direct, thinking")
        if self.engine not in engine_names():
            bad("engine", f"{self.engine!r} is not one of {', '.join(engine_names())}")
        for key in ("batch_size", "load_workers", "queue_size", "max_in_flight"):
            if getattr(self, key) < 1:
                bad(key, f"must be at least 1, got {getattr(self, key)}")
        if self.max_samples is not None and self.max_samples < 1:
            bad("max_samples", f"must be at least 1 (or unset), got {self.max_samples}")
        if self.probe is not None and self.probe not in PROBES:
            bad("probe", f"{self.probe!r} is not one of {', '.join(PROBES)} (or unset: the real video)")

    def pipeline(self) -> PipelineSettings:
        return PipelineSettings(self.load_workers, self.queue_size, self.max_in_flight)

    def annotations_dir(self) -> str | None:
        """``annotations``, else ``$EASYVIDEOR1_ANNOTATIONS``, else None."""
        return self.annotations or os.environ.get(ANNOTATIONS_ENV) or None

    def generation_digest(self, spec_max_new_tokens: int) -> dict:
        """What about generation makes two runs comparable (the engine and throughput knobs are not:
        greedy predictions are engine-independent, tested)."""
        keep = ("style", "temperature", "top_p", "top_k", "presence_penalty", "preset")
        digest = {
            **{k: getattr(self, k) for k in keep},
            "max_new_tokens": self.max_new_tokens or spec_max_new_tokens,
        }
        if self.probe is not None:  # only when set: real-video runs keep the digests they had
            digest["probe"] = self.probe
        if self.min_new_tokens:  # likewise: runs without a minimum length keep their digests
            digest["min_new_tokens"] = self.min_new_tokens
        return digest


def digest_of(*parts: object) -> str:
    """A short stable digest of JSON-able parts (dataclasses included)."""
    blob = json.dumps(
        [dataclasses.asdict(p) if dataclasses.is_dataclass(p) else p for p in parts],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
