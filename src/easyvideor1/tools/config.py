"""``tools.*``: which tools the policy may call, how long an episode may run, and the budgets.

The video tools read two frame tracks of the record's video (``tracks.py``), each an ordinary frame
cache entry that ``preprocess`` writes when tools are on: the *seek* track (dense, small frames:
what ``seek`` picks from) and the *detail* track (sparse, large frames: what ``frame_at`` and
``zoom`` crop). A track missing from the cache is decoded, only the frames a call needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..validation import at_least, positive, require


@dataclass
class ToolsConfig:
    """Tool calling in rollouts and evaluation (off while ``names`` is empty).

    Parameters:
        names (`list[str]`, defaults to `[]`):
            Tools offered to the policy, by registered name (built in: `seek`, `zoom`, `frame_at`);
            empty turns episodes off (one-turn rollouts, as without this section).
        tool_files (`list[str]`, defaults to `[]`):
            Python files registering more tools with `@register_tool` (`tools/base.py`).
        max_turns (`int`, defaults to `3`):
            Tool turns per episode; the policy's turn after the last one must answer (calls made then
            are not run and count as invalid).
        max_calls_per_turn (`int`, defaults to `2`):
            Calls run from one policy turn; the ones after are answered with an error.
        max_frames_per_call (`int`, defaults to `8`):
            Frames one call may return (a `seek` asking for more gets this many; an image counts 1).
        max_frames_per_episode (`int`, defaults to `24`):
            Frames all calls of an episode may return together; a call past it gets an error.
        max_pixels_per_episode (`int`, defaults to `4194304`):
            Pixels all returned frames of an episode may hold together (4 MP: the vision tokens a
            tool adds are pixels / (patch x merge)^2).
        max_episode_tokens (`int`, defaults to `8192`):
            Tokens of the whole episode (prompt, every turn, every tool result); a tool result that
            would pass it ends the episode.
        timeout_s (`float`, defaults to `10.0`):
            Wall-clock limit of one call; a call past it is answered with an error (the thread is
            abandoned: a user tool that may hang forever should keep its own deadline).
        seek_fps (`float`, defaults to `4.0`):
            Frame rate of the seek track (denser than a usual first view's 2 fps).
        seek_max_pixels (`int`, defaults to `65536`):
            Per-frame pixel cap of the seek track (256 x 256).
        detail_fps (`float`, defaults to `1.0`):
            Frame rate of the detail track (`frame_at` and `zoom` take its frame nearest the asked time).
        detail_max_pixels (`int`, defaults to `1048576`):
            Per-frame pixel cap of the detail track (what a crop is cut from).
        image_max_pixels (`int`, defaults to `262144`):
            Pixel cap of one returned image (a `frame_at` frame or a `zoom` crop, resized up or down to it).
        image_min_pixels (`int`, defaults to `4096`):
            Pixel floor of one returned image (a small crop is enlarged to at least this).
    """

    names: list[str] = field(default_factory=list)
    tool_files: list[str] = field(default_factory=list)
    max_turns: int = 3
    max_calls_per_turn: int = 2
    max_frames_per_call: int = 8
    max_frames_per_episode: int = 24
    max_pixels_per_episode: int = 4 * 1024 * 1024
    max_episode_tokens: int = 8192
    timeout_s: float = 10.0
    seek_fps: float = 4.0
    seek_max_pixels: int = 256 * 256
    detail_fps: float = 1.0
    detail_max_pixels: int = 1024 * 1024
    image_max_pixels: int = 512 * 512
    image_min_pixels: int = 64 * 64

    def __post_init__(self) -> None:
        require(
            isinstance(self.names, (list, tuple)) and all(isinstance(n, str) and n for n in self.names),
            "tools.names",
            "must be a list of tool names",
            self.names,
        )
        for key in ("max_turns", "max_calls_per_turn", "max_frames_per_call", "max_frames_per_episode"):
            at_least(f"tools.{key}", getattr(self, key), 1)
        for key in ("max_pixels_per_episode", "max_episode_tokens", "seek_max_pixels", "detail_max_pixels"):
            at_least(f"tools.{key}", getattr(self, key), 1)
        for key in ("timeout_s", "seek_fps", "detail_fps"):
            positive(f"tools.{key}", getattr(self, key))
        at_least("tools.image_min_pixels", self.image_min_pixels, 1)
        require(
            self.image_max_pixels >= self.image_min_pixels,
            "tools.image_max_pixels",
            f"must be >= tools.image_min_pixels ({self.image_min_pixels})",
            self.image_max_pixels,
        )

    @property
    def enabled(self) -> bool:
        return bool(self.names)
