"""The evaluation pipeline on real synthetic videos and the tiny model: resume after SIGKILL,
failures in the denominator, reports."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.evaluation.pipeline import _appending
from easyvideor1.evaluation.report_html import read_payload
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.outdir import OutputError


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval")
    write_synthetic_set(str(d / "syn"), 10, size=(64, 48), duration=(1.0, 2.0))
    make_tiny_model(str(d / "model"))
    return d


def _cmd(assets, out, *extra):
    return [
        sys.executable,
        "-m",
        "easyvideor1",
        "eval",
        "--model",
        str(assets / "model"),
        "--benchmarks",
        "synthetic",
        "--video-root",
        str(assets / "syn"),
        "--out",
        str(out),
        "--min-pixels",
        "1024",
        "--max-pixels",
        "4096",
        "--nframes",
        "4",
        "--batch-size",
        "1",
        "--max-new-tokens",
        "24",
        *extra,
    ]


def _predictions(out):
    return [json.loads(line) for line in open(out / "synthetic" / "predictions.jsonl") if line.strip()]


def test_sigkill_then_rerun_equals_an_uninterrupted_run(assets, tmp_path):
    full = subprocess.run(_cmd(assets, tmp_path / "full"), capture_output=True, text=True)
    assert full.returncode == 0, full.stderr[-2000:]
    reference = {p["sample_id"]: p["prediction"] for p in _predictions(tmp_path / "full")}
    total = sum(1 for _ in open(assets / "syn" / "records.jsonl"))
    assert len(reference) == total

    out = tmp_path / "killed"
    proc = subprocess.Popen(
        _cmd(assets, out), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    pred = out / "synthetic" / "predictions.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not pred.exists() or sum(1 for _ in open(pred)) < 5):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = sum(1 for _ in open(pred))
    assert 0 < before < total, "the kill must land midway"
    again = subprocess.run(_cmd(assets, out), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = _predictions(out)
    ids = [r["sample_id"] for r in rows]
    assert len(ids) == len(set(ids)) == total, "no duplicated and no missing sample"
    assert {r["sample_id"]: r["prediction"] for r in rows} == reference
    results = json.loads((out / "results.json").read_text())["synthetic"]
    assert results["evaluated"] == total and "by_task" in results
    detail = results["settings_detail"]
    assert detail["eval"]["engine"] == "hf" and detail["frames"]["model_family"] in ("qwen3vl", "qwen3_vl")
    assert (out / "results.md").read_text().count("synthetic") == 1
    assert (out / "scores.png").stat().st_size > 1000
    page = read_payload(str(out / "report.html"))
    assert len(page["rows"]) == total and all(r["th"] is not None for r in page["rows"])
    assert all(t.startswith("data:image/jpeg;base64,") for t in page["thumbs"])
    cmp = subprocess.run(
        [sys.executable, "-m", "easyvideor1", "eval", "compare", str(tmp_path / "full"), str(out)],
        capture_output=True,
        text=True,
    )
    assert cmp.returncode == 0 and "| synthetic |" in cmp.stdout and "+0.00" in cmp.stdout


def test_undecodable_videos_count_as_wrong(assets, tmp_path):
    syn = tmp_path / "syn"
    syn.mkdir()
    rows = [json.loads(line) for line in open(assets / "syn" / "records.jsonl")][:4]
    for r in rows:
        r["videos"] = [str(assets / "syn" / r["videos"][0])]
    rows[1]["videos"] = [str(tmp_path / "missing.mp4")]
    (syn / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = _cmd(assets, tmp_path / "out")
    cmd[cmd.index("--video-root") + 1] = str(syn)
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())["synthetic"]
    assert results["failures"] == 1 and results["evaluated"] == 4 and results["samples"] == 4
    failed = [p for p in _predictions(tmp_path / "out") if p["failed"]]
    assert len(failed) == 1 and "not found" in failed[0]["error"] and failed[0]["accuracy"] == 0.0


def test_preset_sets_the_frame_budget_and_flags_override_it(assets, tmp_path):
    cmd = _cmd(assets, tmp_path / "out", "--preset", "greedy", "--max-samples", "2")
    r = subprocess.run(cmd, capture_output=True, text=True)  # explicit --nframes/pixels override the preset
    assert r.returncode == 0, r.stderr[-2000:]
    bad = subprocess.run(_cmd(assets, tmp_path / "o2", "--preset", "nope"), capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown preset" in bad.stderr
    from easyvideor1.evaluation.presets import get_preset

    official = get_preset("qwen3vl-official")
    assert official["data"]["video_max_frames"] == 512 and official["sampling"]["top_k"] == 20


def test_a_failing_request_is_a_recorded_failure_and_spares_its_batch(assets, tmp_path):
    """The HF engine raises for one sample of a batch of four: that sample is recorded as a failure
    (counted as wrong) and the other three are retried one by one and scored."""
    import dataclasses

    from easyvideor1.data.config import DataConfig
    from easyvideor1.evaluation import get_benchmark
    from easyvideor1.evaluation.config import EvalConfig
    from easyvideor1.evaluation.pipeline import BenchmarkInputs, run_benchmark
    from easyvideor1.models.loading import load_policy
    from easyvideor1.rollout.hf import HFRolloutEngine

    spec = get_benchmark("synthetic")
    records = spec.load(str(assets / "syn"))[:6]
    records[2] = dataclasses.replace(records[2], problem=records[2].problem + " POISON")
    model, processor = load_policy(str(assets / "model"))

    class Flaky(HFRolloutEngine):
        """The real HF engine, refusing every batch that holds the poisoned prompt."""

        poisoned_batches: list[int] = []

        def generate(self, prompts, repeats, sampling):
            if any("POISON" in t for t in prompts.texts):
                self.poisoned_batches.append(len(prompts.texts))
                raise RuntimeError("the engine refused this request")
            return super().generate(prompts, repeats, sampling)

    data = DataConfig(
        model_family="qwen3vl",
        video_root=str(assets / "syn"),
        video_fps=None,
        video_nframes=4,
        video_min_pixels=1024,
        video_max_pixels=4096,
    )
    settings = EvalConfig(batch_size=4, max_new_tokens=8, load_workers=1)
    inputs = BenchmarkInputs.build(spec, records, str(assets / "syn" / spec.annotation), settings)
    engine = Flaky(model, processor, max_batch=4)
    results = run_benchmark(inputs, engine, processor, data, settings, str(tmp_path), "tiny-model")
    rows = _predictions(tmp_path)
    assert sorted(r["sample_id"] for r in rows) == sorted(inputs.ids)
    failed = [r for r in rows if r["failed"]]
    assert [r["sample_id"] for r in failed] == [inputs.ids[2]]
    assert "refused" in failed[0]["error"]
    assert results["failures"] == 1 and results["evaluated"] == 6
    if max(engine.poisoned_batches) > 1:  # the batch failed, then its samples went one by one
        assert engine.poisoned_batches[-1] == 1


def test_a_full_disk_while_appending_rows_is_one_line_naming_the_file(tmp_path):
    """A write past a file size limit fails with EFBIG, as on a full disk: the row writer's error
    names the file, exit code 1 (the machine failed a valid run); the rows written before stay."""
    path = tmp_path / "thumbs.jsonl"
    path.write_text(json.dumps({"sample_id": "a", "thumb": "x"}) + "\n")
    before = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    default = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the default action kills instead of failing
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 10, hard))
    try:
        with pytest.raises(OutputError) as e, _appending(str(path)) as rows:
            rows.write([{"sample_id": "b", "thumb": "y" * 100}])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, default)
    assert str(e.value) == f"cannot write {path}: File too large (EFBIG)" and e.value.exit_code == 1
    assert path.read_bytes().startswith(before)
