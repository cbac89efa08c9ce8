"""`eval --data`: a records file in the training format evaluated as a benchmark (issue 16), end to end
through the CLI: `synth --n 20`, `make-tiny-model`, `preprocess` into a frame cache, then `eval`:
results.json with the headline and per-task breakdown, a record whose video is missing counted as a
failure, a cache_only run (no decode at all) giving the decoding run's predictions, and a SIGKILL
midway resumed to the same predictions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from easyvideor1.evaluation.report_html import read_payload

EV = [sys.executable, "-m", "easyvideor1"]
FRAMES = ["--nframes", "4", "--min-pixels", "1024", "--max-pixels", "4096"]


def _run(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([*EV, *args], capture_output=True, text=True)
    assert r.returncode == 0, f"{args[0]} failed:\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("dataeval")
    syn, model = d / "S", d / "M"
    _run("synth", "--out", str(syn), "--n", "20", "--size", "64x48")
    _run("make-tiny-model", "--out", str(model))
    records = [json.loads(line) for line in open(syn / "records.jsonl")]
    # the held-out file: the synth records plus one whose video does not exist
    lost = {**records[0], "problem_id": "lost-video", "videos": ["videos/not_there.mp4"]}
    val = d / "val.jsonl"
    val.write_text("".join(json.dumps(r) + "\n" for r in [*records, lost]))
    _run(
        "preprocess", "--data", str(syn / "records.jsonl"), "--video-root", str(syn),
        "--cache-dir", str(d / "cache"), "--model-family", "qwen3vl", "--workers", "2", "--quiet", *FRAMES,
    )  # fmt: skip
    return d, len(records) + 1


def _eval_cmd(d, out, *extra):
    return [
        *EV, "eval", "--model", str(d / "M"), "--data", str(d / "val.jsonl"), "--video-root", str(d / "S"),
        "--out", str(out), *FRAMES, "--max-new-tokens", "6", "--batch-size", "2", "--load-workers", "1",
        "--group-by", "data_type", *extra,
    ]  # fmt: skip


def _predictions(out):
    rows = [json.loads(line) for line in open(out / "val" / "predictions.jsonl") if line.strip()]
    return rows


@pytest.mark.slow  # ~30 s: three evaluations of 121 samples
def test_eval_data_from_the_cache_then_killed_and_resumed(assets, tmp_path):
    d, total = assets
    # 1. from the frame cache only: a lookup that missed would be a failure, never a decode
    ref_out = tmp_path / "cached"
    r = subprocess.run(
        _eval_cmd(d, ref_out, "--cache-dir", str(d / "cache"), "--cache-mode", "cache_only"),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((ref_out / "results.json").read_text())["val"]
    assert res["samples"] == res["evaluated"] == total
    assert res["failures"] == 1, "only the record whose video is missing fails: every cache lookup hit"
    assert res["metric"] == "accuracy" and 0.0 <= res["score"] <= 1.0
    tasks = {"multiple choice", "numerical", "boolean", "ocr", "temporal grounding", "spatial grounding"}
    assert set(res["by_problem_type"]) == tasks and res["by_data_type"] == {
        "video": pytest.approx(res["score"])
    }
    rows = {r["sample_id"]: r for r in _predictions(ref_out)}
    lost = [r for r in rows.values() if r["sample_id"].startswith("lost-video~")]
    assert len(lost) == 1 and lost[0]["failed"] and "not_there.mp4" in lost[0]["error"]
    assert res["score"] == pytest.approx(sum(r["accuracy"] for r in rows.values()) / total)
    assert res["settings"] and res["settings_detail"]["model_fingerprint"]
    page = read_payload(str(ref_out / "report.html"))
    assert len(page["rows"]) == total and sum(r["v"] == "failure" for r in page["rows"]) == 1
    assert sum(r["th"] is not None for r in page["rows"]) == total - 1, "thumbnails from the loaded frames"

    # 2. decoding, killed midway, resumed: the cached run's predictions, no duplicate, none missing
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        _eval_cmd(d, out, "--batch-size", "1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    pred = out / "val" / "predictions.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not pred.exists() or sum(1 for _ in open(pred)) < 8):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = sum(1 for _ in open(pred))
    assert 0 < before < total, "the kill must land midway"
    again = subprocess.run(_eval_cmd(d, out), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = _predictions(out)
    ids = [r["sample_id"] for r in resumed]
    assert len(ids) == len(set(ids)) == total
    assert {r["sample_id"]: r["prediction"] for r in resumed} == {k: r["prediction"] for k, r in rows.items()}
    res2 = json.loads((out / "results.json").read_text())["val"]
    assert res2["settings"] == res["settings"], "where frames come from is not part of the settings"
    assert {k: res2[k] for k in ("score", "by_problem_type", "failures")} == {
        k: res[k] for k in ("score", "by_problem_type", "failures")
    }


def test_group_by_a_field_no_record_has_is_an_error(assets, tmp_path):
    d, _ = assets
    r = subprocess.run(_eval_cmd(d, tmp_path / "o", "--group-by", "durtion"), capture_output=True, text=True)
    assert r.returncode == 2 and "breakdown field 'durtion' is in no record" in r.stderr
    assert not (tmp_path / "o").exists(), "checked before any model loads"
