"""Synthetic videos with known ground truth, for tests, the demo and benchmarks (nothing downloaded).

Each video shows, over a dark background: a coloured square moving left to right, a white circle
that is visible during a known time span, a word overlaid during a known span, and a number of
full-frame flashes. ``write_synthetic_set`` writes the videos and a JSONL of records covering
multiple choice, counting (numerical), temporal grounding, spatial grounding, OCR and yes/no.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..errors import UserError
from ..media.encode import CODECS, encode_video

COLOURS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (50, 80, 230), "yellow": (230, 210, 40)}
WORDS = ["CAT", "SUN", "BOX", "RED", "MAP", "KEY", "OWL", "FOX", "JAM", "ZIP"]
OPTION_LETTERS = "ABCD"
COLOUR_OPTIONS = [f"{OPTION_LETTERS[i]}. {c}" for i, c in enumerate(COLOURS)]
# Frames are rendered one by one in Python: 240 fps (high-speed video) over the longest default
# clip (6 s) is 1,440 frames, seconds per video; far more ran for minutes without saying why
MAX_FPS = 240.0


@dataclass
class Scene:
    """Ground truth of one synthetic video (times in seconds, boxes in source pixels)."""

    width: int
    height: int
    fps: float
    duration: float
    colour: str
    flash_times: list[float]
    circle_span: tuple[float, float] | None
    circle_box: tuple[int, int, int, int]
    word: str
    word_span: tuple[float, float]

    @property
    def n_frames(self) -> int:
        return max(1, round(self.duration * self.fps))


def random_scene(rng: random.Random, width: int, height: int, fps: float, duration: float) -> Scene:
    r = max(3, min(width, height) // 8)
    cx, cy = rng.randint(r, width - r - 1), rng.randint(r, height - r - 1)
    has_circle = rng.random() < 0.75
    a = rng.uniform(0.0, duration * 0.5)
    b = rng.uniform(a + duration * 0.2, duration)
    flashes = (
        sorted(rng.uniform(0.1, duration - 0.1) for _ in range(rng.randint(0, 3))) if duration > 0.5 else []
    )
    w0 = rng.uniform(0, duration * 0.4)
    return Scene(
        width=width,
        height=height,
        fps=fps,
        duration=duration,
        colour=rng.choice(list(COLOURS)),
        flash_times=_distinct_frames([round(t, 2) for t in flashes], fps),
        circle_span=(round(a, 2), round(b, 2)) if has_circle else None,
        circle_box=(cx - r, cy - r, cx + r, cy + r),
        word=rng.choice(WORDS),
        word_span=(round(w0, 2), round(min(duration, w0 + duration * 0.5), 2)),
    )


def _distinct_frames(times: list[float], fps: float) -> list[float]:
    """Drop flashes that would land on the same (or an adjacent) frame, so each one is countable."""
    kept: list[float] = []
    for t in times:
        if all(abs(round(t * fps) - round(k * fps)) > 1 for k in kept):
            kept.append(t)
    return kept


def render_frames(scene: Scene, seed: int = 0):
    """Yield uint8 RGB frames of ``scene``."""
    rng = np.random.default_rng(seed)
    h, w = scene.height, scene.width
    background = (rng.integers(0, 40, size=(h, w, 3))).astype(np.uint8)
    side = max(2, min(h, w) // 5)
    font = ImageFont.load_default()
    flash_frames = {round(t * scene.fps) for t in scene.flash_times}
    x0, y0, x1, y1 = scene.circle_box
    yy, xx = np.ogrid[:h, :w]
    circle = ((yy - (y0 + y1) / 2) ** 2 + (xx - (x0 + x1) / 2) ** 2) <= ((x1 - x0) / 2) ** 2
    for i in range(scene.n_frames):
        t = i / scene.fps
        if i in flash_frames:
            yield np.full((h, w, 3), 255, np.uint8)
            continue
        frame = background.copy()
        if scene.circle_span and scene.circle_span[0] <= t <= scene.circle_span[1]:
            frame[circle] = 255
        x = int((w - side) * (t / max(scene.duration, 1e-6)))
        y = (h - side) // 2
        frame[y : y + side, x : x + side] = COLOURS[scene.colour]
        if scene.word_span[0] <= t <= scene.word_span[1] and h >= 16 and w >= 32:
            img = Image.fromarray(frame)
            ImageDraw.Draw(img).text((2, 2), scene.word, fill=(255, 255, 255), font=font)
            frame = np.asarray(img)
        yield frame


def scene_records(scene: Scene, video: str, vid: str) -> list[dict]:
    """Records with ground truth for several task types about one video."""
    colours = list(COLOURS)
    base = {"videos": [video], "data_type": "video", "video_id": vid}
    records = [
        {
            **base,
            "problem_id": f"{vid}-colour",
            "problem_type": "multiple choice",
            "problem": "<video>What colour is the moving square?",
            "options": list(COLOUR_OPTIONS),
            "answer": OPTION_LETTERS[colours.index(scene.colour)],
        },
        {
            **base,
            "problem_id": f"{vid}-flashes",
            "problem_type": "numerical",
            "problem": "How many times does the whole screen flash white?",
            "answer": str(len(scene.flash_times)),
        },
        {
            **base,
            "problem_id": f"{vid}-word",
            "problem_type": "ocr",
            "problem": "What word is written in the top-left corner?",
            "answer": scene.word,
        },
        {
            **base,
            "problem_id": f"{vid}-circle-yn",
            "problem_type": "boolean",
            "problem": "Does a white circle appear in the video?",
            "answer": "Yes" if scene.circle_span else "No",
        },
    ]
    if scene.circle_span:
        a, b = scene.circle_span
        records.append(
            {
                **base,
                "problem_id": f"{vid}-circle-when",
                "problem_type": "temporal grounding",
                "problem": "When is the white circle visible? Give the start and end time in seconds.",
                "answer": json.dumps({"time": [a, b]}),
            }
        )
        records.append(
            {
                **base,
                "problem_id": f"{vid}-circle-where",
                "problem_type": "spatial grounding",
                "problem": f"Where is the white circle at {round((a + b) / 2, 1)} seconds? Give its box.",
                "answer": json.dumps({"boxes": list(scene.circle_box)}),
                "box_format": "pixels",
                "frame_size": [scene.width, scene.height],
            }
        )
    return records


def write_synthetic_set(
    out_dir: str,
    n: int,
    seed: int = 0,
    size: tuple[int, int] = (160, 120),
    fps: float = 10.0,
    duration: float | tuple[float, float] = (2.0, 6.0),
    codec: str = "h264",
) -> str:
    """Write ``n`` videos under ``out_dir/videos`` and ``out_dir/records.jsonl``; returns the JSONL path.

    Video paths in the records are relative to ``out_dir``, so that directory is the video root.
    """
    if not 0 < fps <= MAX_FPS:
        raise UserError(f"synthetic fps must be > 0 and <= {MAX_FPS:g}, got {fps:g}")
    rng = random.Random(seed)
    os.makedirs(os.path.join(out_dir, "videos"), exist_ok=True)
    ext = CODECS[codec][2]
    records: list[dict] = []
    for i in range(n):
        d = duration if isinstance(duration, (int, float)) else rng.uniform(*duration)
        scene = random_scene(rng, size[0], size[1], fps, round(d, 2))
        vid = f"synth_{seed}_{i:04d}"
        rel = f"videos/{vid}{ext}"
        encode_video(os.path.join(out_dir, rel), render_frames(scene, seed + i), Fraction(fps), codec=codec)
        records.extend(scene_records(scene, rel, vid))
    return write_jsonl(os.path.join(out_dir, "records.jsonl"), records)


def write_jsonl(path: str, rows: list[dict]) -> str:
    """``rows`` as a JSONL file, written whole or not at all (a ``.part`` file renamed at the end:
    an interrupted run never leaves a short records file that looks complete)."""
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    os.replace(tmp, path)
    return path


def _write_splits(
    out_dir: str, n_train: int, n_val: int, record: Callable[[str, int], dict]
) -> tuple[str, str]:
    """A demo set's files: ``record(split, i)`` for each record of the train and val splits, in
    that order, each split one JSONL file in ``out_dir`` (media under ``out_dir/videos``)."""
    os.makedirs(os.path.join(out_dir, "videos"), exist_ok=True)
    paths = [
        write_jsonl(os.path.join(out_dir, f"{split}.jsonl"), [record(split, i) for i in range(n)])
        for split, n in (("train", n_train), ("val", n_val))
    ]
    return paths[0], paths[1]


@dataclass(frozen=True)
class DemoVideos:
    """The demo sets' videos: a square half as wide as the frame moving over noise, ``size``
    pixels a side, ``fps`` frames a second, every draw from ``seed``."""

    size: int = 32
    fps: float = 4.0
    seed: int = 0


def write_demo_set(
    out_dir: str,
    n_train: int = 256,
    n_val: int = 64,
    mixed: bool = False,
    n_frames: int = 4,
    videos: DemoVideos = DemoVideos(),
) -> tuple[str, str]:
    """The embedded demo's task: the colour of a square moving over noise, four fixed options.

    Small enough for a sub-1M-parameter model to learn on a CPU (the colour must be read from the
    video; the option order is fixed, see environment notes). Every record carries an
    ``offline_output`` gold response for hybrid offline/online groups. Returns (train, val) paths.
    ``mixed`` turns every fourth record into an image record (the last frame, as PNG) and every
    fourth into a text-only one (the colour named in the question), so batches mix modalities.
    """
    from PIL import Image

    size, fps = videos.size, videos.fps
    rng = np.random.default_rng(videos.seed)
    colours = list(COLOURS)
    side = size // 2

    def record(split: str, i: int) -> dict:
        colour = colours[int(rng.integers(len(colours)))]
        y = int(rng.integers(0, size - side + 1))
        x0, direction = int(rng.integers(0, size - side + 1)), int(rng.choice([-1, 1]))
        frames = []
        for t in range(n_frames):
            f = rng.integers(0, 50, size=(size, size, 3), dtype=np.uint8)
            x = int(np.clip(x0 + direction * t * 2, 0, size - side))
            f[y : y + side, x : x + side] = COLOURS[colour]
            frames.append(f)
        letter = OPTION_LETTERS[colours.index(colour)]
        row = {
            "problem_id": f"{split}-{i}",
            "problem": "What colour is the moving square?",
            "problem_type": "multiple choice",
            "options": COLOUR_OPTIONS,
            "data_type": "video",
            "answer": letter,
            "offline_output": f"<answer>{letter}</answer>",
        }
        kind = i % 4 if mixed else 0
        if kind == 1:  # image
            rel = f"images/{split}_{i:05d}.png"
            os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
            Image.fromarray(frames[-1]).save(os.path.join(out_dir, rel))
            row.update(problem="What colour is the square?", images=[rel], data_type="image")
        elif kind == 3:  # text only
            row.update(problem=f"A square is painted {colour}. What colour is the square?", data_type="text")
        else:
            rel = f"videos/{split}_{i:05d}.mp4"
            encode_video(os.path.join(out_dir, rel), frames, Fraction(fps).limit_denominator(1001), crf=10)
            row["videos"] = [rel]
        return row

    return _write_splits(out_dir, n_train, n_val, record)


def tool_demo_windows(duration_s: int, fps: float, first_view_frames: int, model_family: str = "qwen3_vl"):
    """The one-second windows ``[k, k + 1]`` of a ``duration_s`` video that no frame of the first
    view (``first_view_frames`` sampled as the trainer samples them) falls in."""
    from ..media.sampling import frame_indices
    from ..models.families import get_family

    total = round(duration_s * fps)
    params = get_family(model_family).frames.params(nframes=first_view_frames)
    seen = set(frame_indices(params, total, fps)[0])
    per_s = round(fps)
    return [k for k in range(duration_s) if not seen & set(range(k * per_s, (k + 1) * per_s + 1))]


def tool_call_text(name: str, arguments: dict) -> str:
    """One call as the Qwen templates write it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def write_tool_demo_set(
    out_dir: str,
    n_train: int = 256,
    n_val: int = 64,
    first_view_frames: int = 4,
    duration_s: int = 12,
    videos: DemoVideos = DemoVideos(),
) -> tuple[str, str]:
    """The tool demo's task: the colour of the square during a one-second window the question names.

    The square moves over noise for ``duration_s`` seconds; during the window it has the asked
    colour, before and after it another colour drawn independently (a distractor: the first view
    shows a square, just not the asked one). The windows are those no first-view frame falls in, so
    the answer is invisible without looking again (``seek`` on the window shows it): a policy
    without tools is at chance (0.25). Each record has ``offline_turns`` (the call, then the
    answer) for the warm-up and hybrid groups, and ``window`` (seconds) for the demo's hit rate.
    Returns (train, val) paths."""
    size, fps = videos.size, videos.fps
    rng = np.random.default_rng(videos.seed)
    colours = list(COLOURS)
    windows = tool_demo_windows(duration_s, fps, first_view_frames)
    if not windows:
        raise UserError(f"no one-second window of a {duration_s} s video escapes {first_view_frames} frames")
    side, n_frames = size // 2, round(duration_s * fps)

    def record(split: str, i: int) -> dict:
        colour, other = (colours[int(c)] for c in rng.integers(len(colours), size=2))
        k = int(rng.choice(windows))
        y = int(rng.integers(0, size - side + 1))
        frames = []
        for f in range(n_frames):
            img = rng.integers(0, 50, size=(size, size, 3), dtype=np.uint8)
            x = round((size - side) * f / max(n_frames - 1, 1))
            img[y : y + side, x : x + side] = COLOURS[colour if k <= f / fps <= k + 1 else other]
            frames.append(img)
        rel = f"videos/{split}_{i:05d}.mp4"
        encode_video(os.path.join(out_dir, rel), frames, Fraction(fps).limit_denominator(1001), crf=10)
        letter = OPTION_LETTERS[colours.index(colour)]
        return {
            "problem_id": f"{split}-{i}",
            "problem": f"What colour is the square between {k} s and {k + 1} s?",
            "problem_type": "multiple choice",
            "options": COLOUR_OPTIONS,
            "data_type": "video",
            "videos": [rel],
            "answer": letter,
            "window": [k, k + 1],
            "offline_turns": [
                tool_call_text("seek", {"start_s": k, "end_s": k + 1}),
                f"<answer>{letter}</answer>",
            ],
        }

    return _write_splits(out_dir, n_train, n_val, record)
