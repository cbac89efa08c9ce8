"""Named evaluation settings (frame budget + sampling), applied before explicit flags.

No preset names a model family: the evaluated checkpoint does (``config.json``), so one preset
can serve every family with the same vision tower.

``qwen3vl-official`` is the Qwen3-VL team's video evaluation setting (their VideoMME scripts):
fps 2, 4-512 frames, 3,584-401,408 pixels per frame, 19,267,584 pixels per video, and their
instruct sampling (temperature 0.7, top_p 0.8, top_k 20, presence penalty 1.5; both engines apply
the penalty the same way, see ``rollout.hf.PresencePenalty``).

``qwen3_5-official`` / ``qwen3_5-thinking``: the Qwen3.5 model card's "Best Practices" sampling
(huggingface.co/Qwen/Qwen3.5-*, README "Sampling Parameters"): instruct / non-thinking mode for
general tasks temperature 0.7, top_p 0.8, top_k 20, min_p 0, presence penalty 1.5; thinking mode
for general tasks temperature 1.0, top_p 0.95, top_k 20, min_p 0, presence penalty 1.5. The card
gives no video budget of its own: Qwen3.5 takes video through the Qwen3-VL processor and a
Qwen3-VL-style vision tower (patch 16, merge 2), so the frame budget is Qwen3-VL's above.

``greedy`` keeps the frame budget and decodes greedily (deterministic, resumable bit for bit).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

_QWEN3VL_FRAMES = {
    "video_fps": 2.0,
    "video_min_frames": 4,
    "video_max_frames": 512,
    "video_min_pixels": 3584,
    "video_max_pixels": 401408,
    "video_total_pixels": 19267584,
}

PRESETS: dict[str, dict[str, Any]] = {
    "qwen3vl-official": {
        "data": _QWEN3VL_FRAMES,
        "sampling": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "presence_penalty": 1.5},
    },
    "qwen3_5-official": {
        "data": _QWEN3VL_FRAMES,
        "sampling": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "presence_penalty": 1.5},
    },
    "qwen3_5-thinking": {
        "data": _QWEN3VL_FRAMES,
        "sampling": {
            "temperature": 1.0,
            "top_p": 0.95,
            "top_k": 20,
            "presence_penalty": 1.5,
            "style": "thinking",
        },
    },
    "greedy": {"data": _QWEN3VL_FRAMES, "sampling": {"temperature": 0.0}},
}


def get_preset(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    return PRESETS[name]
