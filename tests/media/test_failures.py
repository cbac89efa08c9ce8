"""Issue 20 item 5: one media-failure taxonomy (``media/failures.py``).

A file a record names that cannot be used is a ``MediaFailure`` whose text is ``<name as in the
record>: <cause>``; training's ``skipped_records.jsonl``, ``eval --data``'s failure row and
``filter``'s ``pass_rates.jsonl`` quote that same line for the same corrupt video. Any other error
raised while loading is a bug: the shared pipeline stops with it instead of writing a failure row.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys

import pytest
from PIL import Image

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, load_media
from easyvideor1.data.records import load_records
from easyvideor1.data.synthetic import write_demo_set
from easyvideor1.media.cache import VideoLoader, entry_key, entry_path
from easyvideor1.media.failures import FILE_NOT_FOUND, MediaFailure
from easyvideor1.rollout.config import PipelineSettings
from easyvideor1.rollout.pipeline import run_pipeline
from tests.conftest import make_video

FRAMES = ["--nframes", "4", "--min-pixels", "1024", "--max-pixels", "1024"]


def _data(**extra) -> DataConfig:
    return DataConfig(
        model_family="qwen3vl",
        video_fps=None,
        video_nframes=2,
        video_min_pixels=1024,
        video_max_pixels=1024,
        **extra,
    )


def _record(pid: str, videos=(), images=()) -> dict:
    return {
        "problem_id": pid,
        "problem": "What colour is the square?",
        "problem_type": "multiple choice",
        "options": ["A. red", "B. green"],
        "answer": "A",
        "videos": list(videos),
        "images": list(images),
    }


def _dataset(d, rows, cfg=None, loader=None) -> RecordDataset:
    path = d / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = cfg or _data()
    return RecordDataset(load_records(str(path)), cfg, str(path), loader)


def _failure(dataset, i) -> MediaFailure:
    with pytest.raises(MediaFailure) as e:
        load_media(dataset[i], dataset.cfg, dataset.loader)
    return e.value


def _truncated_mp4(src: str, dst) -> None:
    """A real mp4 cut to 1.5 KiB: its header promises frames the file no longer holds."""
    shutil.copy(src, dst)
    with open(dst, "r+b") as f:
        f.truncate(1536)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("failures")
    (d / "videos").mkdir()
    make_video(d / "videos", "good", fps=4, duration=1.0, size=(32, 32))
    (d / "videos" / "garbage.mp4").write_bytes(b"\x00\x01not a video at all" * 200)
    _truncated_mp4(str(d / "videos" / "good.mp4"), d / "videos" / "cut.mp4")
    Image.new("RGB", (32, 32), (200, 10, 10)).save(d / "red.png")
    (d / "broken.png").write_bytes(b"garbage, not an image" * 50)
    (d / "cut.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 50)  # a PNG signature, then nothing
    return d


def test_a_missing_file_is_named_as_the_record_names_it(media, tmp_path):
    ds = _dataset(media, [_record("v", videos=["videos/nowhere.mp4"]), _record("i", images=["nowhere.png"])])
    video, image = _failure(ds, 0), _failure(ds, 1)
    assert str(video) == video.reason == "videos/nowhere.mp4: file not found"
    assert (video.path, video.cause) == ("videos/nowhere.mp4", FILE_NOT_FOUND)
    assert str(image) == "nowhere.png: file not found"
    assert isinstance(video, ValueError), "code that caught the old ValueErrors still catches it"
    # raised in a forked loader, it reaches the parent whole
    again = pickle.loads(pickle.dumps(video))
    assert (type(again), again.path, again.cause, str(again)) == (
        MediaFailure,
        video.path,
        video.cause,
        str(video),
    )


def test_garbage_and_truncated_videos_cannot_be_decoded(media):
    ds = _dataset(
        media, [_record("g", videos=["videos/garbage.mp4"]), _record("c", videos=["videos/cut.mp4"])]
    )
    for i, name in enumerate(["videos/garbage.mp4", "videos/cut.mp4"]):
        reason = _failure(ds, i).reason
        assert reason.startswith(f"{name}: cannot decode: "), reason
        assert "\n" not in reason and str(media) not in reason, (
            "one line, the path only as the record names it"
        )
    good = _dataset(media, [_record("ok", videos=["videos/good.mp4"])])
    videos, _ = load_media(good[0], good.cfg, good.loader)
    assert videos[0].frames.shape[0] == 2


def test_images_pil_refuses(media, monkeypatch):
    ds = _dataset(media, [_record("b", images=["broken.png"]), _record("r", images=["red.png"])])
    assert _failure(ds, 0).reason == "broken.png: cannot decode: not an image format PIL can read"
    cut = _failure(_dataset(media, [_record("c", images=["cut.png"])]), 0).reason
    assert cut.startswith("cut.png: cannot decode: ") and "\n" not in cut
    # PIL refuses an image of more than twice MAX_IMAGE_PIXELS as a possible decompression bomb
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    assert _failure(ds, 1).reason.startswith("red.png: image too large: Image size (1024 pixels) exceeds")
    wide = media / "wide.png"
    Image.new("RGB", (1000, 4), 0).save(wide)  # 250:1, beyond any model grid's aspect ratio
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10**8)
    assert _failure(_dataset(media, [_record("w", images=["wide.png"])]), 0).reason.startswith(
        "wide.png: cannot resize: aspect ratio must be smaller than"
    )


def test_frame_cache_problems_in_cache_only_mode(media, tmp_path):
    cfg = _data(cache_dir=str(tmp_path / "cache"), cache_mode="cache_only")
    (tmp_path / "cache").mkdir()
    ds = _dataset(media, [_record("v", videos=["videos/good.mp4"])], cfg)
    assert _failure(ds, 0).reason == (
        "videos/good.mp4: no cache entry (cache_only mode: run `easyvideor1 preprocess` with the same settings)"
    )
    sample = ds[0]
    entry = entry_path(cfg.cache_dir, entry_key(sample.videos[0], sample.video_params))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    reason = _failure(ds, 0).reason
    assert reason.startswith(f"videos/good.mp4: frame cache entry corrupt: {entry}: "), reason
    assert reason.endswith("(cache_only mode: rebuild it with `easyvideor1 preprocess`)")


class _BuggyLoader(VideoLoader):
    """A loader with a bug for one video: not a media problem, so nothing may hide it."""

    def load(self, video_path, params, entry=None):
        if video_path.endswith("good.mp4"):
            raise KeyError("frame_indices")
        return super().load(video_path, params, entry)


class _Work:
    def request(self, i, prompt):
        raise AssertionError("no sample of this job reaches the engine")

    def scored(self, i, responses):
        raise AssertionError("nothing is scored")

    def failure(self, i, reason):
        return {"index": i, "failed": True, "error": reason}


@pytest.mark.parametrize("workers", [0, 1])
def test_a_non_media_error_stops_the_pipeline(media, workers):
    rows = [_record("lost", videos=["videos/nowhere.mp4"]), _record("bug", videos=["videos/good.mp4"])]
    ds = _dataset(media, rows, loader=_BuggyLoader())
    written = []
    settings = PipelineSettings(load_workers=workers, queue_size=1)
    with pytest.raises(RuntimeError, match=r"media loading stopped: KeyError: 'frame_indices'"):
        run_pipeline(ds, [0, 1], None, None, _Work(), written.extend, settings)
    # the media failure before it is still a failure row, worded by the taxonomy
    assert written == [{"index": 0, "failed": True, "error": "videos/nowhere.mp4: file not found"}]


# --- the same corrupt video through train, eval --data and filter ---------------------------------

EV = [sys.executable, "-m", "easyvideor1"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Five demo records and one whose video is a truncated real mp4, the tiny model."""
    from easyvideor1.models.tiny import make_tiny_model

    d = tmp_path_factory.mktemp("same_reason")
    train, _ = write_demo_set(str(d / "data"), n_train=6, n_val=1)
    rows = [json.loads(line) for line in open(train)]
    _truncated_mp4(str(d / "data" / rows[0]["videos"][0]), d / "data" / "videos" / "corrupt.mp4")
    rows[3]["videos"] = ["videos/corrupt.mp4"]
    data = d / "data" / "mixed.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = make_tiny_model(str(d / "model"), "qwen3vl")
    return data, model, rows[3]["problem_id"]


def _run(cmd) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{cmd[3]} failed:\n{r.stderr[-3000:]}"


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in open(path) if x.strip()]


@pytest.mark.slow  # ~60 s: a training step, an evaluation and a filter run of the tiny model
def test_one_corrupt_video_one_reason_in_train_eval_and_filter(mixed, tmp_path):
    from easyvideor1.config import RunConfig, load_config
    from easyvideor1.trainer.loop import Trainer
    from tests.trainer.conftest import base_overrides

    data, model, bad_id = mixed
    assets = {"train": data, "val": data, "model": model}
    run = tmp_path / "train"
    cfg = load_config(
        RunConfig, None, [*base_overrides(assets, run), "data.val_files=[]", "trainer.max_steps=1"]
    )
    Trainer(cfg).train()
    (skipped,) = _lines(run / "skipped_records.jsonl")
    assert skipped["problem_id"] == bad_id
    reason = skipped["reason"]
    assert reason.startswith("videos/corrupt.mp4: cannot decode: "), reason

    # eval resolves the videos against --video-root, train against the data file: the same name
    out = tmp_path / "eval"
    _run([*EV, "eval", "--model", model, "--data", str(data), "--video-root", str(data.parent),
          "--out", str(out), *FRAMES, "--max-new-tokens", "4", "--load-workers", "1"])  # fmt: skip
    failed = [r for r in _lines(out / "mixed" / "predictions.jsonl") if r["failed"]]
    assert [(r["sample_id"].split("~")[0], r["error"]) for r in failed] == [(bad_id, reason)]

    out = tmp_path / "filter"
    _run([*EV, "filter", "--model", model, "--data", str(data), "--out", str(out), "--n", "2",
          "--max-new-tokens", "4", "--load-workers", "1", *FRAMES])  # fmt: skip
    failed = [r for r in _lines(out / "pass_rates.jsonl") if r["status"] == "failed"]
    assert [(r["problem_id"], r["error"]) for r in failed] == [(bad_id, reason)]
