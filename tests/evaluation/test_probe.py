"""Video-dependence probes (``data/probe.py``): the transform, where it sits in the data path (after
the frame cache, which it never writes), and ``easyvideor1 eval --probe`` kept apart from the real run."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_prompts, load_media
from easyvideor1.data.preprocess import preprocess
from easyvideor1.data.probe import BLANK_VALUE, probe_video, shuffle_order
from easyvideor1.data.records import load_records
from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.evaluation.compare import compare_runs
from easyvideor1.evaluation.config import EvalConfig, EvalConfigError
from easyvideor1.media.video import SampledVideo
from easyvideor1.models.tiny import build_processor, make_tiny_model
from tests.conftest import write_modality_records


def _video(t: int = 6) -> SampledVideo:
    frames = torch.arange(t, dtype=torch.uint8).view(t, 1, 1, 1).expand(t, 4, 4, 3).contiguous()
    return SampledVideo(frames, {"frame_indices": list(range(0, 2 * t, 2)), "source_fps": 4.0})


def test_blank_is_mid_grey_with_the_same_shape_and_metadata_and_leaves_the_input_alone():
    video = _video()
    before = video.frames.clone()
    blank = probe_video(video, "blank")
    assert blank.frames.shape == video.frames.shape and blank.frames.dtype == torch.uint8
    assert bool((blank.frames == BLANK_VALUE).all())
    assert blank.meta["frame_indices"] == video.meta["frame_indices"] and blank.meta["probe"] == "blank"
    assert torch.equal(video.frames, before) and "probe" not in video.meta
    assert probe_video(video, None) is video


def test_shuffle_is_a_fixed_permutation_that_moves_frames():
    video = _video(8)
    a, b = probe_video(video, "shuffle", "rec-1#0"), probe_video(video, "shuffle", "rec-1#0")
    order = [int(f[0, 0, 0]) for f in a.frames]
    assert sorted(order) == list(range(8)) and order != list(range(8))
    assert torch.equal(a.frames, b.frames)  # the same key, the same order (resumable evaluations)
    assert any(shuffle_order(8, f"k{i}") != order for i in range(5))  # other keys, other orders
    for n in (2, 3, 4):  # never the identity, however short
        assert all(shuffle_order(n, f"s{i}") != list(range(n)) for i in range(50))
    assert shuffle_order(1, "x") == [0]


def test_unknown_probes_are_refused_with_their_key():
    with pytest.raises(ValueError, match="probe must be one of blank, shuffle"):
        probe_video(_video(), "noise")
    with pytest.raises(EvalConfigError, match="eval.probe"):
        EvalConfig(probe="black")
    with pytest.raises(ValueError, match="probe"):
        RecordDataset([], DataConfig(), "x.jsonl", probe="mute")


def test_the_probe_is_in_the_digest_only_when_set():
    real, blank, shuffled = EvalConfig(), EvalConfig(probe="blank"), EvalConfig(probe="shuffle")
    assert "probe" not in real.generation_digest(16)  # real runs keep the digests they had
    digests = {json.dumps(c.generation_digest(16), sort_keys=True) for c in (real, blank, shuffled)}
    assert len(digests) == 3


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_probe_applies_after_the_cache_keeps_tokens_and_images_and_never_writes_entries(tmp_path):
    path = write_modality_records(tmp_path, frames=8, seed=3)
    cfg = DataConfig(
        video_fps=None, video_nframes=4, video_min_pixels=1024, video_max_pixels=1024, model_family="qwen3_vl"
    )
    cfg.cache_dir = str(tmp_path / "cache")
    preprocess([path], cfg, cfg.cache_dir, workers=1, progress=False)
    entries = sorted((tmp_path / "cache").rglob("*.safetensors"))
    assert entries
    before = {str(e): _digest(e) for e in entries}
    records = load_records(path)
    real_set = RecordDataset(records, cfg, path)
    mixed = [i for i, r in enumerate(records) if r.problem_id == "mixed"][0]
    processor = build_processor("qwen3_vl")
    for probe in ("blank", "shuffle"):
        probed_set = RecordDataset(records, cfg, path, probe=probe)
        real, probed = real_set[mixed], probed_set[mixed]
        assert real.video_entries[0] and real.video_entries == probed.video_entries  # served by the cache
        (real_videos, real_images), (videos, images) = (
            load_media(s, cfg, real_set.loader) for s in (real, probed)
        )
        assert videos[0].frames.shape == real_videos[0].frames.shape
        assert not torch.equal(videos[0].frames, real_videos[0].frames)
        assert np.array_equal(np.asarray(images[0]), np.asarray(real_images[0]))  # images are not probed
        a, b = (encode_prompts(processor, [s], cfg, real_set.loader).inputs for s in (real, probed))
        # the same prompt and token count, the same grid; only the pixels differ
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(
            a["video_grid_thw"], b["video_grid_thw"]
        )
        assert torch.equal(a["pixel_values"], b["pixel_values"])  # the image
        assert not torch.equal(a["pixel_values_videos"], b["pixel_values_videos"])
    assert {str(e): _digest(e) for e in sorted((tmp_path / "cache").rglob("*.safetensors"))} == before
    again = load_media(real_set[mixed], cfg, real_set.loader)[0][0]
    assert not bool((again.frames == BLANK_VALUE).all())  # the cache still serves the real frames


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe_eval")
    write_synthetic_set(str(d / "syn"), 3, size=(64, 48), duration=(1.0, 1.5))
    make_tiny_model(str(d / "model"))
    return d


@pytest.fixture(scope="module")
def engine(assets):
    from easyvideor1.models.loading import load_policy
    from easyvideor1.rollout.hf import HFRolloutEngine

    policy, processor = load_policy(str(assets / "model"))
    return HFRolloutEngine(policy.eval(), processor), processor  # close() leaves the model alone


def _eval(assets, engine, out, *extra):
    """``easyvideor1 eval`` in this process (flags parsed as the CLI parses them), one model for all."""
    from easyvideor1.cli import build_parser
    from easyvideor1.cli.evaluate import _eval_config
    from easyvideor1.evaluation import commands

    argv = ["eval", "--model", str(assets / "model"), "--benchmarks", "synthetic"]
    argv += ["--video-root", str(assets / "syn"), "--out", str(out), "--min-pixels", "1024"]
    argv += [
        "--max-pixels",
        "1024",
        "--nframes",
        "4",
        "--max-new-tokens",
        "4",
        "--load-workers",
        "1",
        "--max-samples",
        "3",
        *extra,
    ]
    args, rest = build_parser().parse_known_args(argv)
    cfg = _eval_config(args, rest)
    commands.evaluate(cfg, args.model, args.out, served=engine)
    results = json.loads((out / "synthetic" / "results.json").read_text())
    rows = [json.loads(line) for line in open(out / "synthetic" / "predictions.jsonl") if line.strip()]
    return results, rows


def test_eval_probe_is_kept_apart_from_the_real_run(assets, engine, tmp_path, one_thread):
    out = tmp_path / "run"
    real, rows = _eval(assets, engine, out)
    assert real["probe"] is None and len(rows) == 3
    blank, rows = _eval(assets, engine, out, "--probe", "blank")  # the same directory: nothing reused
    assert blank["probe"] == "blank" and blank["settings_detail"]["eval"]["probe"] == "blank"
    assert blank["settings"] != real["settings"] and blank["evaluated"] == 3 and len(rows) == 6
    assert {r["settings"] for r in rows[3:]} == {blank["settings"]}
    again, rows = _eval(assets, engine, out)  # the real run resumes from its own rows only: nothing new
    assert again["settings"] == real["settings"] and len(rows) == 6 and again["probe"] is None
    assert again["score"] == real["score"]
    shuffled, _ = _eval(assets, engine, tmp_path / "shuffled", "eval.probe=shuffle")  # the config key
    assert shuffled["probe"] == "shuffle"
    assert shuffled["settings"] not in (real["settings"], blank["settings"])
    text = compare_runs(str(out), str(tmp_path / "shuffled"))  # eval-compare names the probe
    assert "video: A real, B shuffle" in text and "| synthetic |" in text
