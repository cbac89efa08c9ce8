"""The tools of one training step or evaluation job: the configured tools, and the tracks and
answers that the episodes of the step share (each video's tracks read once, a call asked again with
the same arguments answered from memory). Each episode gets its own budgets (``calls.py``)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..media.cache import VideoLoader
from ..media.sampling import SamplingParams
from ..models.families import get_family
from .base import ToolContext, ToolResult, tool_specs
from .calls import EpisodeTools
from .config import ToolsConfig
from .tracks import VideoSource, track_params


def tool_tracks(settings: ToolsConfig, model_family: str) -> list[SamplingParams]:
    """The tracks the configured tools read, as the frame-cache parameters ``preprocess`` writes."""
    kinds = sorted({kind for spec in tool_specs(settings) for kind in spec.tracks})
    return [track_params(settings, kind, model_family) for kind in kinds]


@dataclass
class ToolSession:
    """The configured tools, and the tracks and answers the episodes of one step or job share:
    each video's tracks are read once, and a call asked again with the same arguments is answered
    from memory."""

    settings: ToolsConfig
    model_family: str
    loader: VideoLoader | None = None
    max_sources: int = 64  # videos whose tracks and answers are kept; past it the memory starts afresh
    # the tools listed but not served: every call is answered with this error (a probe of what the
    # policy does without them, e.g. the tool demo's "tools disabled" accuracy); None serves them
    refuse: str | None = None
    _sources: dict[str, VideoSource] = field(default_factory=dict)
    _answers: dict[str, ToolResult] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    hits: int = 0

    def __post_init__(self) -> None:
        self.specs = tool_specs(self.settings)  # an unknown tool name fails here, before any episode
        family = get_family(self.model_family)
        if self.specs and family.tokens.no_tools:
            raise ConfigError(
                f"tools.names: {family.model_type} cannot run tool episodes ({family.tokens.no_tools}); "
                "use a Qwen-VL or Qwen3.5 model or drop tools.names"
            )

    def schemas(self) -> list[dict[str, Any]]:
        """The ``tools=`` list of the chat template."""
        return [s.schema() for s in self.specs]

    def episode(self, record: Any, video_paths: list[str]) -> EpisodeTools:
        """Fresh per-episode budgets over this session."""
        return EpisodeTools(self.specs, self, record, list(video_paths), self.settings, refuse=self.refuse)

    def clear(self) -> None:
        """Forget every track and answer (the trainer calls it at each step: answers are reused
        within a step, and a long run must not keep every video's frames)."""
        with self._lock:
            self._sources.clear()
            self._answers.clear()

    def context(self, record: Any, video_paths: list[str], max_frames: int) -> ToolContext:
        with self._lock:
            if len(self._sources) + len(video_paths) > self.max_sources:  # bounded memory on long jobs
                self._sources.clear()
                self._answers.clear()
            sources = [
                self._sources.setdefault(p, VideoSource(p, self.settings, self.model_family, self.loader))
                for p in video_paths
            ]
        return ToolContext(record, sources, self.settings, max_frames)

    def remembered(self, ctx: ToolContext, name: str, args: dict[str, Any]) -> tuple[str, ToolResult | None]:
        key = json.dumps([name, [v.path for v in ctx.videos], ctx.max_frames, args], sort_keys=True)
        with self._lock:
            found = self._answers.get(key)
            self.hits += found is not None
            return key, found

    def remember(self, key: str, result: ToolResult) -> None:
        with self._lock:
            self._answers[key] = result
