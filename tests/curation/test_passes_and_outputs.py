"""The filter's bookkeeping with a scripted engine (real videos, real processor, real reward
library, real output files): pass rates equal the number of right answers the engine was told to
give, the band is inclusive, failures are listed and counted while the job goes on, and every
input format is written back in kind, record for record."""

from __future__ import annotations

import json
import re

import pytest
import torch

from easyvideor1.curation import Band, FilterSettings, PassRule, default_threshold
from easyvideor1.curation.filter import run_filter, settings_digest
from easyvideor1.curation.inputs import load_inputs
from easyvideor1.curation.job import finish
from easyvideor1.data.config import DataConfig
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.rewards import RewardConfig
from easyvideor1.rollout.base import RequestQueue, Responses
from tests.conftest import make_video

N = 4


class ScriptedEngine(RequestQueue):
    """Answers ``Question K`` with K right answers (``<answer>A</answer>``) out of n, then wrong ones
    (served through the request queue every batch engine uses)."""

    owns_weights = adapter_sync = False

    def __init__(self):
        self.calls = 0

    def run_batch(self, requests):
        outs = []
        for request in requests:
            self.calls += 1
            (k,) = (int(m) for m in re.findall(r"Question (\d+)", request.prompt.text))
            n = request.n
            texts = ["<answer>A</answer>"] * k + ["<answer>B</answer>"] * (n - k)
            mask = torch.ones((n, 3), dtype=torch.long)
            outs.append(Responses(ids=mask.clone(), mask=mask, texts=texts, truncated=[False] * n))
        return outs

    def close(self):
        self._queue_stop()


def _row(k: int, **extra) -> dict:
    return {
        "problem_id": f"q{k}",
        "problem": f"<video>Question {k}: what colour is the square?",
        "problem_type": "multiple choice",
        "options": ["A. red", "B. green"],
        "answer": "A",
        "videos": ["v.mp4"],
        "note": "kept as written",
        **extra,
    }


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("curate")
    make_video(d, "v", fps=4, duration=1.0, size=(32, 32))
    make_tiny_model(str(d / "model"))
    from transformers import AutoProcessor

    return d, AutoProcessor.from_pretrained(str(d / "model"))


def _data(d) -> DataConfig:
    return DataConfig(
        model_family="qwen3vl", video_fps=None, video_nframes=2, video_min_pixels=1024, video_max_pixels=1024
    )


def _write_inputs(d):
    """JSONL (0..4 right, a missing video, a bad line, CRLF and unicode kept), a JSON array, Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = [json.dumps(_row(k), ensure_ascii=False) for k in range(N + 1)]
    lines.insert(2, json.dumps(_row(9, problem_id="lost", videos=["nowhere.mp4"])))
    lines.insert(4, "{not json")
    lines[1] = json.dumps(_row(1, note="naïve ✓"), ensure_ascii=False, indent=None, separators=(",", ":"))
    (d / "a.jsonl").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    (d / "b.json").write_text(json.dumps([_row(k, problem_id=f"b{k}") for k in (0, 2, 4)], indent=2))
    pq.write_table(pa.Table.from_pylist([_row(k, problem_id=f"c{k}") for k in (1, 3)]), d / "c.parquet")
    return [str(d / "a.jsonl"), str(d / "b.json"), str(d / "c.parquet")]


def test_pass_rates_band_failures_and_formats(assets, tmp_path):
    d, processor = assets
    paths = _write_inputs(d)
    reward = RewardConfig()
    settings = FilterSettings(n=N, keep="0.25:0.75", load_workers=1, max_new_tokens=4)
    files = load_inputs(paths, reward)
    data = _data(d)
    engine = ScriptedEngine()
    stats = run_filter(files, data, reward, settings, str(tmp_path), "scripted", engine, processor)
    assert stats["sampled"] == 11 and engine.calls == 10, "the lost video never reaches the engine"
    report = finish(files, data, reward, settings, str(tmp_path), "scripted-model", "scripted")

    rows = [json.loads(x) for x in open(tmp_path / "pass_rates.jsonl")]
    assert len(rows) == 12, "one line per input record, failures and invalid records included"
    by_pid = {r["problem_id"]: r for r in rows if r["problem_id"]}
    for pid, r in by_pid.items():
        if pid == "lost":
            assert r["status"] == "failed" and "nowhere.mp4" in r["error"] and r["pass_rate"] is None
            continue
        k = int(pid[1:])
        assert (r["passes"], r["n"], r["pass_rate"]) == (k, N, k / N), pid
        assert r["rewards"] == [1.0] * k + [0.1] * (N - k), "overall = 0.9 accuracy + 0.1 format"
        assert r["kept"] == (1 <= k <= 3), "band 0.25:0.75 is inclusive: 1/4 and 3/4 are kept"
        assert r["sample_id"].startswith(f"{pid}~") and r["task"] == "multiple_choice"
    (bad,) = [r for r in rows if r["status"] == "invalid"]
    assert bad["source"].endswith("a.jsonl:5") and "invalid JSON" in bad["error"]

    # kept records in the input's format, exactly as written
    src = (d / "a.jsonl").read_bytes().split(b"\r\n")
    kept_a = (tmp_path / "kept" / "a.jsonl").read_bytes()
    assert kept_a == b"".join(src[i] + b"\r\n" for i in (1, 3, 5)), "q1 (unicode, compact), q2, q3"
    kept_b = json.loads((tmp_path / "kept" / "b.json").read_text())
    assert kept_b == [_row(2, problem_id="b2")]
    import pyarrow.parquet as pq

    kept_c = pq.read_table(tmp_path / "kept" / "c.parquet")
    assert kept_c.to_pylist() == [_row(1, problem_id="c1"), _row(3, problem_id="c3")]
    assert kept_c.schema == pq.read_table(d / "c.parquet").schema

    t = report["totals"]
    assert (t["total"], t["kept"], t["always_solved"], t["never_solved"], t["failed_to_load"]) == (
        12,
        6,
        2,
        2,
        2,
    )
    mc = report["by_task"]["multiple_choice"]
    assert mc["total"] == 11 and mc["failed_to_load"] == 1
    assert report["histogram"]["records"] == [2, 2, 2, 2, 2]
    assert report["thresholds"]["multiple_choice"] == 1.0 and report["band"]["inclusive"]
    assert (tmp_path / "pass_rate_histogram.png").stat().st_size > 5000
    assert "| **all** | 12 | 6 | 2 | 2 | 2 |" in (tmp_path / "report.md").read_text()
    assert "nowhere.mp4" in (tmp_path / "report.html").read_text()

    # a rerun reuses every sampled record (the failed one is tried again) and writes the same files
    before = {p: (tmp_path / p).read_bytes() for p in ("pass_rates.jsonl", "report.json", "kept/a.jsonl")}
    again = ScriptedEngine()
    stats = run_filter(files, data, reward, settings, str(tmp_path), "scripted", again, processor)
    assert stats["sampled"] == 1 and again.calls == 0
    finish(files, data, reward, settings, str(tmp_path), "scripted-model", "scripted")
    assert before == {p: (tmp_path / p).read_bytes() for p in before}

    # another model (fingerprint) invalidates every response; another band needs no new sampling
    assert settings_digest(settings, data, "other") != settings_digest(settings, data, "scripted")
    wide = FilterSettings(n=N, keep="0:1", load_workers=1, max_new_tokens=4)
    assert settings_digest(wide, data, "scripted") == settings_digest(settings, data, "scripted")
    assert finish(files, data, reward, wide, str(tmp_path), "m", "scripted")["totals"]["kept"] == 10


def test_band_and_pass_rule():
    band = Band.parse("0.1:0.9")
    assert [band.keeps(k, 8) for k in range(9)] == [False] + [True] * 7 + [False]
    assert Band.parse("0.3:0.7").keeps(3, 10) and Band.parse("0.3:0.7").keeps(7, 10)
    assert not Band.parse("0.3:0.7").keeps(2, 10)
    for bad in ("0.9:0.1", "0.5", "a:b", "-0.1:0.5", "0:1.5"):
        with pytest.raises(ValueError, match="--keep"):
            Band.parse(bad)
    assert default_threshold("multiple_choice") == 1.0 and default_threshold("ocr") == 1.0
    assert default_threshold("temporal_grounding") == 0.5 and default_threshold("regression") == 0.5
    rule = PassRule.parse(["0.8", "temporal grounding=0.3"])
    assert rule.threshold("temporal_grounding") == 0.3 and rule.threshold("ocr") == 0.8
    assert rule.passes("temporal_grounding", 0.1 + 0.2) and not rule.passes("ocr", 0.79)
    with pytest.raises(ValueError, match="colour"):
        PassRule.parse(["colour=0.5"])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        PassRule.parse(["1.5"])


def test_cli_checks_inputs_before_loading_a_model(assets, tmp_path, capsys):
    """Input errors end the command (exit 2, the file and the reason named) before any model loads;
    a record no reward task handles is listed as invalid, not a crash."""
    d, _ = assets
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(_row(1)) + "\n")
    from easyvideor1.cli import main

    def run(*args: str) -> str:
        assert main(["filter", "--out", str(tmp_path / "o"), *args]) == 2
        return capsys.readouterr().err

    err = run("--model", str(d / "model"), "--data", str(tmp_path / "none.jsonl"))
    assert "data file not found" in err and "none.jsonl" in err
    assert "--keep" in run("--model", str(d / "model"), "--data", str(good), "--keep", "0.9:0.1")
    assert "model directory not found" in run("--model", str(tmp_path / "nope"), "--data", str(good))
    assert not (tmp_path / "o").exists()
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps(_row(1, problem_type="colour guess")) + "\n")
    (item,) = load_inputs([str(odd)], RewardConfig())[0].items
    assert item.record is None and item.task == "colour guess" and "colour guess" in item.error


def test_frames_come_from_the_cache(assets, tmp_path):
    """With ``data.cache_mode=cache_only`` every video comes from the frame cache ``preprocess``
    built (a miss would be a failure, never a decode), and where frames come from is not part of
    the settings: the responses are those of a decoding run."""
    import dataclasses

    from easyvideor1.data.preprocess import preprocess

    d, processor = assets
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(_row(k, videos=[str(d / "v.mp4")])) + "\n" for k in range(3)))
    decoding = _data(d)
    cached = dataclasses.replace(decoding, cache_dir=str(tmp_path / "cache"), cache_mode="cache_only")
    report = preprocess([str(path)], decoding, str(tmp_path / "cache"), workers=1, progress=False)
    assert report["failed"] == 0
    reward, settings = RewardConfig(), FilterSettings(n=N, load_workers=1, max_new_tokens=4)
    files = load_inputs([str(path)], reward)
    run_filter(files, cached, reward, settings, str(tmp_path / "o"), "m", ScriptedEngine(), processor)
    rows = [json.loads(x) for x in open(tmp_path / "o" / "responses.jsonl")]
    assert [r["failed"] for r in rows] == [False] * 3, rows
    assert settings_digest(settings, cached, "m") == settings_digest(settings, decoding, "m")
    (tmp_path / "empty").mkdir()
    missing = dataclasses.replace(cached, cache_dir=str(tmp_path / "empty"))
    run_filter(files, missing, reward, settings, str(tmp_path / "o2"), "m", ScriptedEngine(), processor)
    rows = [json.loads(x) for x in open(tmp_path / "o2" / "responses.jsonl")]
    assert all(r["failed"] and "cache" in r["error"] for r in rows), rows[0]
