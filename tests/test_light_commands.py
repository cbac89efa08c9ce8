"""Commands that load no model start without torch: ``--help`` pages, ``eval --list``,
``eval --dry-run`` and ``score`` (issue 20, item 8).

Each command runs in a fresh interpreter (a test process has torch loaded already) on real files:
a synthetic benchmark and a records file written here. The child reports the heavy packages it
ended up with; each case also checks the command's output, so a command that failed early before
reaching its imports cannot pass.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from easyvideor1.data.synthetic import write_synthetic_set

HEAVY = ("torch", "transformers", "vllm")

# runs the CLI in-process (so sys.modules can be read after it), then prints what was loaded
_CHILD = """
import json, sys
from easyvideor1.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:  # argparse's --help exits
    rc = e.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({"rc": rc, "heavy": heavy}), file=sys.stderr)
""".replace("HEAVY", repr(HEAVY))


def _run(*argv: str) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, timeout=300)
    report = json.loads(r.stderr.strip().splitlines()[-1])
    return r, report


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("light")
    write_synthetic_set(str(d / "syn"), 3, size=(64, 48), duration=(1.0, 1.5))
    record = {"problem_id": "q1", "problem": "<video>What colour is the square?", "problem_type": "multiple choice",
              "options": ["A. red", "B. green"], "solution": "<answer>B</answer>", "videos": ["v.mp4"]}  # fmt: skip
    (d / "val.jsonl").write_text(json.dumps(record) + "\n")
    return d


def _rows(path):
    return [json.loads(line) for line in open(path) if line.strip()]


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["--help"], "score"),
        (["score", "--help"], "--predictions"),
        (["eval", "--help"], "--dry-run"),
        (["train", "--help"], "usage: easyvideor1 train"),
    ],
)
def test_help_pages_load_no_torch(argv, shown):
    r, report = _run(*argv)
    assert report["rc"] == 0 and shown in r.stdout, r.stderr[-2000:]
    assert report["heavy"] == [], f"{' '.join(argv)} imported {report['heavy']}"


def test_config_module_loads_no_torch():
    code = (
        "import sys, easyvideor1.config; print(sorted({m.split('.')[0] for m in sys.modules} & set(HEAVY)))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code.replace("HEAVY", repr(HEAVY))], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-2000:]


def test_eval_list_loads_no_torch():
    r, report = _run("eval", "--list")
    assert report["rc"] == 0 and any(line.startswith("synthetic ") for line in r.stdout.splitlines())
    assert report["heavy"] == [], f"eval --list imported {report['heavy']}"


def _dry_run_and_score(files, out):
    """``eval --dry-run`` on the synthetic benchmark, then ``score`` of its gold answers: score 1."""
    argv = ["--benchmarks", "synthetic", "--video-root", str(files / "syn")]
    r, dry = _run("eval", "--dry-run", *argv, "--out", str(out / "dry"))
    assert dry["rc"] == 0, r.stderr[-2000:]
    prompts = _rows(out / "dry" / "synthetic" / "prompts.jsonl")
    assert len(prompts) == len(_rows(files / "syn" / "records.jsonl")) and all(p["prompt"] for p in prompts)
    preds = out / "made_elsewhere.jsonl"
    preds.write_text(
        "".join(json.dumps({"sample_id": p["sample_id"], "response": p["answer"]}) + "\n" for p in prompts)
    )
    r, scored = _run("score", *argv, "--predictions", str(preds), "--out", str(out / "sc"))
    assert scored["rc"] == 0, r.stderr[-2000:]
    assert json.loads((out / "sc" / "synthetic" / "results.json").read_text())["score"] == 1.0
    return dry, scored


def test_dry_run_and_score_load_no_torch(files, tmp_path):
    dry, scored = _dry_run_and_score(files, tmp_path)
    assert dry["heavy"] == [] and scored["heavy"] == [], (dry, scored)


def test_dry_run_of_a_records_file_loads_no_torch(files, tmp_path):
    r, report = _run("eval", "--dry-run", "--data", str(files / "val.jsonl"), "--out", str(tmp_path / "d"))
    assert report["rc"] == 0, r.stderr[-2000:]
    (row,) = [row for p in (tmp_path / "d").glob("*/prompts.jsonl") for row in _rows(p)]
    assert "What colour is the square?" in row["prompt"]
    assert report["heavy"] == [], f"eval --dry-run --data imported {report['heavy']}"
