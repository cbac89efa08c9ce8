"""``curation/job.py``: ``filter --out`` on a folder of someone else's files is refused before any
model loads, unless ``--reuse-out`` asks to write there (its files of the filter's names replaced)."""

from __future__ import annotations

import json
import os

from easyvideor1.cli import main
from easyvideor1.curation import job
from easyvideor1.errors import ConfigError


def test_a_foreign_non_empty_out_is_refused_unless_asked(tmp_path, capsys, monkeypatch):
    model, foreign = tmp_path / "model", tmp_path / "site"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3_vl"}))
    foreign.mkdir()
    (foreign / "report.md").write_text("mine\n")
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"problem": "2 + 2?", "answer": "4", "problem_type": "numerical"}) + "\n")
    argv = ["filter", "--model", str(model), "--data", str(data), "--out", str(foreign)]

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"easyvideor1 filter: --out {foreign}: not empty and not the output of an earlier filter run; "
        "choose an empty or new directory, or give --reuse-out to write into it anyway\n"
    )
    assert os.listdir(foreign) == ["report.md"]

    # asked: the folder is taken, and the run goes on to load its engine (stopped there)
    def engine(*args, **kwargs):
        raise ConfigError("the engine was reached")

    monkeypatch.setattr(job, "load_engine", engine)
    assert main([*argv, "--reuse-out"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "easyvideor1 filter: the engine was reached"
    assert (foreign / "report.md").read_text() == "mine\n" and (foreign / ".lock").is_file()
