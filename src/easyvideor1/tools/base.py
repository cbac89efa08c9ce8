"""What a tool is: a name, a JSON schema for its arguments, and a function of the record and the
arguments returning text and/or frames. The registry of tools is the one every pluggable part uses
(:class:`easyvideor1.registry.Registry`); a user tool is one Python file listed in
``tools.tool_files``::

    from easyvideor1.tools import ToolResult, register_tool

    @register_tool(
        "count_frames",
        description="How many frames the video has.",
        parameters={"type": "object", "properties": {}},
    )
    def count_frames(ctx, args):
        return ToolResult(text=str(ctx.video.info.total_frames))

A tool refuses a call it cannot serve by raising :class:`ToolError`: the policy gets its message
as the tool's result and the episode goes on (``calls.py`` also turns any other exception, a
timeout and arguments that break the schema into such results, and counts them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..registry import Registry, UnknownNameError, load_plugin_files

if TYPE_CHECKING:
    from .config import ToolsConfig
    from .tracks import VideoSource


class UnknownToolError(UnknownNameError):
    """A tool name that no registered tool answers to (in a config; a policy's call gets a result)."""


class ToolError(Exception):
    """A call the tool cannot serve (a time outside the video, an empty window, a budget spent):
    its message, one line, is what the policy reads as the tool's result."""


@dataclass
class ToolResult:
    """What one call returns: text and/or media for the tool turn.

    ``images``: PIL images (a zoomed crop, one frame); ``videos``:
    :class:`~easyvideor1.media.video.SampledVideo` clips whose metadata carries the source times, so
    the processor renders the same ``<t seconds>`` stamps as for the first view.
    """

    text: str = ""
    images: list = field(default_factory=list)
    videos: list = field(default_factory=list)

    @property
    def frames(self) -> int:
        """Frames it returns: an image counts one, a clip its frames (the frame budgets)."""
        return len(self.images) + sum(int(v.frames.shape[0]) for v in self.videos)

    @property
    def pixels(self) -> int:
        """Pixels it returns over all its frames (the pixel budget)."""
        return sum(im.width * im.height for im in self.images) + sum(
            int(v.frames.shape[0] * v.frames.shape[1] * v.frames.shape[2]) for v in self.videos
        )


@dataclass
class ToolContext:
    """What a tool function gets besides its arguments: the record's videos and the limits of this
    call (``max_frames``: what the per-call and the episode's remaining frame budgets allow)."""

    record: Any
    videos: list[VideoSource]
    settings: ToolsConfig
    max_frames: int

    @property
    def video(self) -> VideoSource:
        if not self.videos:
            raise ToolError("this sample has no video")
        return self.videos[0]


ToolFunction = Callable[[ToolContext, dict[str, Any]], ToolResult]


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool: ``function(ctx, args)`` with ``args`` already checked against
    ``parameters`` (a JSON schema of an object)."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: ToolFunction
    tracks: tuple[str, ...] = ()  # the frame tracks it reads ("seek", "detail"): what preprocess caches

    def schema(self) -> dict[str, Any]:
        """The entry the chat template's ``tools=`` argument takes (OpenAI function format)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


TOOLS: Registry[ToolSpec] = Registry(
    "tool",
    builtins=("easyvideor1.tools.video",),
    error=UnknownToolError,
    how_to_add="Register one with @register_tool in a file listed in tools.tool_files.",
    definition=lambda spec: spec.function,
)


def register_tool(
    name: str,
    *,
    description: str,
    parameters: dict[str, Any],
    aliases: Iterable[str] = (),
    override: bool = False,
    tracks: Iterable[str] = (),
) -> Callable[[ToolFunction], ToolFunction]:
    """Register the decorated ``fn(ctx, args) -> ToolResult`` as tool ``name``.

    The policy sees ``name`` exactly as given (the template's tool list), so it must be a plain
    identifier; ``parameters`` must be a JSON schema of ``"type": "object"``. ``tracks``: the
    frame tracks of ``tools/tracks.py`` it reads (``seek``, ``detail``), which ``preprocess``
    then writes to the frame cache.
    """
    tracks = tuple(tracks)
    unknown = [t for t in tracks if t not in ("seek", "detail")]
    if unknown:
        raise ValueError(f"tool {name!r}: unknown tracks {unknown} (known: seek, detail)")
    if not str(name).isidentifier():
        raise ValueError(f"tool name must be an identifier (the policy writes it in its call), got {name!r}")
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ValueError(f'tool {name!r}: parameters must be a JSON schema with "type": "object"')
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(parameters)  # a broken schema fails here, not at the first call

    def decorator(function: ToolFunction) -> ToolFunction:
        spec = ToolSpec(name, description, parameters, function, tracks)
        TOOLS.register(name, spec, aliases=aliases, override=override)
        return function

    return decorator


def get_tool(name: str) -> ToolSpec:
    """The tool registered as ``name`` (any spelling); :class:`UnknownToolError` otherwise."""
    return TOOLS.get(name)


def load_tool_files(paths: Iterable[str]) -> None:
    """Import user tool files so that their ``@register_tool`` decorators run (idempotent)."""
    TOOLS.names()  # the built-ins first, so that a user tool clashing with one is refused
    load_plugin_files(paths, key="tools.tool_files")


def tool_specs(settings: ToolsConfig) -> list[ToolSpec]:
    """The specs of the tools ``settings`` names (``tools.names``), its ``tools.tool_files`` loaded
    first; an unknown name is an :class:`UnknownToolError` listing the known ones."""
    load_tool_files(settings.tool_files)
    return [get_tool(name) for name in settings.names]
