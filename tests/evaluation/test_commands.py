"""`eval --dry-run`, `score`, `eval --list`, sample identity, the model fingerprint in the settings
digest, the reward config in eval, and the CLI's checks (real tiny model, real synthetic videos)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from easyvideor1.cli import main
from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.evaluation.predictions import read_predictions
from easyvideor1.models.tiny import make_tiny_model
from tests.conftest import hold_in_subprocess, one_line_error


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalcmd")
    write_synthetic_set(str(d / "syn"), 2, size=(64, 48), duration=(1.0, 1.5))
    make_tiny_model(str(d / "model"))
    return d


def _eval(assets, out, *extra, model=None):
    cmd = [
        sys.executable, "-m", "easyvideor1", "eval",
        "--model", str(model or assets / "model"),
        "--benchmarks", "synthetic",
        "--video-root", str(assets / "syn"),
        "--out", str(out),
        "--min-pixels", "1024", "--max-pixels", "4096", "--nframes", "4",
        "--batch-size", "4", "--max-new-tokens", "8", "--load-workers", "1",
        *extra,
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "synthetic" / "results.json").read_text())


def _rows(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def _gold(rec: dict) -> str:
    return f"<answer>{rec['answer']}</answer>"


def test_dry_run_then_score_gives_the_results_of_eval(assets, tmp_path):
    """Responses scored by `score` give eval's results.json numbers; ids agree across the three."""
    ran = _eval(assets, tmp_path / "eval")
    predicted = _rows(tmp_path / "eval" / "synthetic" / "predictions.jsonl")

    argv = ["--benchmarks", "synthetic", "--video-root", str(assets / "syn")]
    assert main(["eval", "--dry-run", *argv, "--out", str(tmp_path / "dry")]) == 0
    prompts = _rows(tmp_path / "dry" / "synthetic" / "prompts.jsonl")
    records = _rows(assets / "syn" / "records.jsonl")
    assert [p["sample_id"] for p in prompts] == [r["sample_id"] for r in predicted]
    assert len(prompts) == len(records)
    first = prompts[0]
    assert first["prompt"].count("<video>") == 1 and "\nA. red\nB. green" in first["prompt"]
    assert first["media"]["videos"] == records[0]["videos"] and first["answer"] == records[0]["answer"]
    assert set(first) >= {"sample_id", "prompt", "media", "answer", "problem_type", "options"}

    made_elsewhere = tmp_path / "responses.jsonl"
    made_elsewhere.write_text(
        "".join(
            json.dumps({"sample_id": r["sample_id"], "response": r["prediction"]}) + "\n" for r in predicted
        )
    )
    assert main(["score", *argv, "--predictions", str(made_elsewhere), "--out", str(tmp_path / "sc")]) == 0
    scored = json.loads((tmp_path / "sc" / "synthetic" / "results.json").read_text())
    same = (
        "score",
        "metric",
        "by_task",
        "samples",
        "evaluated",
        "failures",
        "extraction_failures",
        "not_scored",
    )
    assert {k: scored[k] for k in same} == {k: ran[k] for k in same}

    # gold answers score 1; a sample missing from the file is a failure, counted as wrong
    gold = {p["sample_id"]: _gold(r) for p, r in zip(prompts, records, strict=True)}
    missing = prompts[0]["sample_id"]
    (tmp_path / "gold.jsonl").write_text(
        "".join(json.dumps({"sample_id": k, "response": v}) + "\n" for k, v in gold.items() if k != missing)
        + "[]\nnot json\n"
    )
    assert (
        main(["score", *argv, "--predictions", str(tmp_path / "gold.jsonl"), "--out", str(tmp_path / "g")])
        == 0
    )
    res = json.loads((tmp_path / "g" / "synthetic" / "results.json").read_text())
    n = len(records)
    assert res["failures"] == 1 and res["skipped_prediction_lines"] == 2
    assert res["score"] == pytest.approx((n - 1) / n)


def test_replaced_weights_at_the_same_path_are_evaluated_again(assets, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(assets / "model", model)
    first = _eval(assets, tmp_path / "out", "--max-samples", "3", model=model)
    again = _eval(assets, tmp_path / "out", "--max-samples", "3", model=model)
    pred = tmp_path / "out" / "synthetic" / "predictions.jsonl"
    assert again["settings"] == first["settings"] and len(_rows(pred)) == 3, "unchanged weights: all reused"
    assert again["stage_seconds"]["generate"] == 0.0

    make_tiny_model(str(model), seed=1)  # other weights, same path, same file names and sizes
    third = _eval(assets, tmp_path / "out", "--max-samples", "3", model=model)
    rows = _rows(pred)
    assert third["settings"] != first["settings"]
    assert len(rows) == 6 and {r["settings"] for r in rows[3:]} == {third["settings"]}
    assert third["stage_seconds"]["generate"] > 0 and third["evaluated"] == 3


def test_eval_reads_the_reward_config_and_rescores_without_generating(assets, tmp_path):
    """config=run.yaml brings `reward` into eval: a task file overriding the multiple-choice scorer
    changes the score; stored responses are re-scored, not generated again."""
    plain = _eval(assets, tmp_path / "out", "--max-samples", "6")
    task_file = tmp_path / "lenient.py"
    task_file.write_text(
        "from easyvideor1.rewards import register_task, TaskScore\n"
        "@register_task('multiple choice', aliases=('multiple_choice', 'mcq'), override=True)\n"
        "def everything_is_right(sample):\n"
        "    return TaskScore(1.0, 1.0, 'X', {})\n"
    )
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(f"reward:\n  task_files: [{task_file}]\neval:\n  max_samples: 6\n")
    lenient = _eval(assets, tmp_path / "out", f"config={run_yaml}")
    assert lenient["stage_seconds"]["generate"] == 0.0, "responses reused"
    assert lenient["by_task"]["multiple choice"] == 1.0
    assert plain["by_task"]["multiple choice"] < 1.0
    rows = read_predictions(str(tmp_path / "out" / "synthetic" / "predictions.jsonl")).rows
    assert len(rows) == 6


def test_duplicate_problem_ids_are_scored_apart(tmp_path):
    """LiveSports-3K shares problem_ids between different questions: each keeps its own row."""
    records = [
        {"problem_id": "7", "problem": f"Question {i}?", "problem_type": "multiple choice",
         "options": ["A. x", "B. y", "C. z"], "solution": f"<answer>{letter}</answer>", "path": "v.mp4"}
        for i, letter in enumerate("ABC")
    ] + [{"problem_id": "7", "problem": "Question 0?", "problem_type": "multiple choice",
          "options": ["A. x", "B. y", "C. z"], "solution": "<answer>A</answer>", "path": "v.mp4"}]  # fmt: skip
    ann = tmp_path / "ann"
    ann.mkdir()
    (ann / "livesports3k_qa.json").write_text(json.dumps(records))
    argv = ["--benchmarks", "livesports3k_qa", "--annotations", str(ann)]
    assert main(["eval", "--dry-run", *argv, "--out", str(tmp_path / "dry")]) == 0
    prompts = _rows(tmp_path / "dry" / "livesports3k_qa" / "prompts.jsonl")
    ids = [p["sample_id"] for p in prompts]
    assert len(set(ids)) == 4 and all(i.startswith("7~") for i in ids)
    answers = [p["answer"] for p in prompts]
    preds = tmp_path / "p.jsonl"
    preds.write_text(
        "".join(json.dumps({"sample_id": i, "response": a}) + "\n" for i, a in zip(ids, answers, strict=True))
    )
    assert main(["score", *argv, "--predictions", str(preds), "--out", str(tmp_path / "s")]) == 0
    res = json.loads((tmp_path / "s" / "livesports3k_qa" / "results.json").read_text())
    assert res["score"] == 1.0 and res["duplicate_problem_ids"] == 1 and res["failures"] == 0


def test_predictions_reader_skips_lines_that_are_not_rows(tmp_path):
    path = tmp_path / "predictions.jsonl"
    good = {"sample_id": "a~1", "settings": "s", "prediction": "B"}
    path.write_text('[]\n5\n{"x": 1}\n{"sample_id": 3}\n' + json.dumps(good) + '\n{"sample_id": "b~2", "set')
    found = read_predictions(str(path), "s")
    assert list(found.rows) == ["a~1"] and found.skipped_lines == 5


def _cli(*argv, env=None):
    return subprocess.run(
        [sys.executable, "-m", "easyvideor1", *argv], capture_output=True, text=True, env=env, timeout=120
    )


def test_cli_checks_names_and_numbers_before_loading_a_model(tmp_path):
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    base = ["eval", "--model", str(not_a_model), "--video-root", str(tmp_path), "--out", str(tmp_path / "o")]
    r = _cli(*base, "--benchmarks", "videomme,nope", "--annotations", str(tmp_path))
    assert r.returncode == 2 and "unknown benchmark(s) 'nope'" in r.stderr and "videomme" in r.stderr
    r = _cli(*base, "--benchmarks", "videomme", "--annotations", str(tmp_path))
    assert r.returncode == 2 and "annotation file(s) not found" in r.stderr and "videomme.json" in r.stderr
    for flag, value in (("--max-samples", "-2"), ("--batch-size", "0"), ("--max-new-tokens", "0")):
        r = _cli(*base, "--benchmarks", "synthetic", flag, value)
        assert r.returncode == 2 and flag in r.stderr, (flag, r.stderr[-500:])
    r = _cli(*base, "--benchmarks", "synthetic", "eval.top_p=0")
    assert r.returncode == 2 and "eval.top_p" in r.stderr
    helped = _cli("eval", "--help")
    assert "videoreasonbench" in helped.stdout and "EASYVIDEOR1_ANNOTATIONS" in helped.stdout


def test_list_and_the_annotations_environment_variable(tmp_path):
    ann = tmp_path / "ann"
    ann.mkdir()
    record = {"problem_id": "q1", "problem": "What happens?", "problem_type": "multiple choice",
              "options": ["A. a", "B. b", "C. c", "D. d"], "solution": "<answer>C</answer>",
              "path": "x.mp4", "duration": "short"}  # fmt: skip
    (ann / "videomme.json").write_text(json.dumps([record]))
    env = {**os.environ, "EASYVIDEOR1_ANNOTATIONS": str(ann)}
    listed = _cli("eval", "--list", env=env)
    assert listed.returncode == 0
    line = next(x for x in listed.stdout.splitlines() if x.startswith("videomme "))
    assert "videomme.json" in line and line.rstrip().endswith("yes")
    assert next(x for x in listed.stdout.splitlines() if x.startswith("mvbench ")).rstrip().endswith("no")
    r = _cli("eval", "--dry-run", "--benchmarks", "videomme", "--out", str(tmp_path / "d"), env=env)
    assert r.returncode == 0, r.stderr
    (row,) = _rows(tmp_path / "d" / "videomme" / "prompts.jsonl")
    assert row["answer"] == "<answer>C</answer>" and "What happens?" in row["prompt"]


def test_text_that_is_not_text_is_named_and_counted_by_dry_run_and_score(tmp_path):
    """Issue 21: a lone surrogate, a non-UTF-8 byte or too deep nesting in the records or in the
    predictions stopped `eval --dry-run` and `score` (a partial predictions.jsonl, no results.json).
    Now each such line is named on stderr (file, line, problem_id) and counted in results.json."""
    good = [
        {"problem_id": f"g{i}", "problem": "<video>Colour?", "options": ["A. red", "B. blue"],
         "problem_type": "multiple choice", "solution": "<answer>A</answer>", "videos": ["v.mp4"]}
        for i in range(2)
    ]  # fmt: skip
    deep = "[" * 100_000 + "]" * 100_000
    data = tmp_path / "val.jsonl"
    data.write_bytes(
        (json.dumps(good[0]) + "\n").encode()
        + b'{"problem_id": "s1", "problem": "Colour \\ud800?", "solution": "A"}\n'
        + b'{"problem_id": "u1", "problem": "Colour caf\xe9?", "solution": "A"}\n'
        + (json.dumps(good[1]) + "\n").encode()
        + f'{{"problem_id": "d1", "meta": {deep}}}\n'.encode()
    )
    r = _cli("eval", "--dry-run", "--data", str(data), "--out", str(tmp_path / "dry"))
    assert r.returncode == 0, r.stderr[-2000:]
    prompts = _rows(tmp_path / "dry" / "val" / "prompts.jsonl")
    assert [p["sample_id"].split("~")[0] for p in prompts] == ["g0", "g1"]
    for line, fragment in (
        (2, "(problem_id=s1): field 'problem': lone surrogate \\ud800"),
        (3, "(problem_id=u1): not valid UTF-8 (byte 0xe9 at column 44)"),
        (5, ": nested deeper than Python can parse"),
    ):
        assert f"val: record left out: {data}:{line} {fragment}".replace(" :", ":") in r.stderr, r.stderr

    preds = tmp_path / "responses.jsonl"
    first, second = (p["sample_id"] for p in prompts)
    preds.write_bytes(
        (json.dumps({"sample_id": first, "response": "<answer>A</answer>"}) + "\n").encode()
        + (f'{{"sample_id": "{second}", "response": "<answer>A\\udc80</answer>"}}\n').encode()
        + (f'{{"sample_id": "{second}", "response": "<answer>\xff</answer>"}}\n').encode("latin-1")
        + (f'{{"sample_id": "{second}", "response": {deep}}}\n').encode()
    )
    r = _cli("score", "--data", str(data), "--predictions", str(preds), "--out", str(tmp_path / "sc"))
    assert r.returncode == 0, r.stderr[-2000:]
    for line, fragment in (
        (2, "field 'response': lone surrogate \\udc80"),
        (3, "not valid UTF-8 (byte 0xff at column"),
        (4, "nested deeper than Python can parse"),
    ):
        assert f"{preds}: line {line} skipped: {fragment}" in r.stderr, r.stderr
    bench = tmp_path / "sc" / "val"
    res = json.loads((bench / "results.json").read_text())
    assert (res["samples"], res["unreadable_records"], res["skipped_prediction_lines"]) == (2, 3, 3)
    assert res["failures"] == 1 and res["score"] == 0.5  # the second sample has no usable response
    assert sorted(os.listdir(bench)) == ["predictions.jsonl", "results.json"], "nothing partial left"
    assert [r["sample_id"] for r in _rows(bench / "predictions.jsonl")] == [first, second]


def test_predictions_that_are_empty_or_not_files_are_named(assets, tmp_path):
    argv = [
        "score",
        "--benchmarks",
        "synthetic",
        "--video-root",
        str(assets / "syn"),
        "--out",
        str(tmp_path / "s"),
    ]
    (tmp_path / "empty.jsonl").write_text("\n")
    for given, fragment in [
        ("/dev/null", "predictions file /dev/null: no rows"),  # exists (a device): read, and empty
        (str(tmp_path / "empty.jsonl"), f"predictions file {tmp_path / 'empty.jsonl'}: no rows"),
        (str(tmp_path), f"predictions file {tmp_path} is a directory"),
        (str(tmp_path / "nope.jsonl"), "predictions file not found"),
    ]:
        one_line_error(_cli(*argv, "--predictions", given), fragment)


@pytest.mark.parametrize("command", ["eval", "score", "filter"])
def test_a_second_run_into_one_out_says_which_run_holds_it(assets, tmp_path, command):
    """Two evals into one --out once interleaved their rows; the second now stops, naming the first,
    and once the first is gone (killed: the kernel drops its lock) the directory is free again."""
    out = tmp_path / "out"
    bench = ["--benchmarks", "synthetic", "--video-root", str(assets / "syn")]
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"sample_id": "x", "response": "A"}) + "\n")
    argv = {
        "eval": ["eval", "--model", str(assets / "model"), *bench],
        "score": ["score", *bench, "--predictions", str(preds)],
        "filter": [
            "filter",
            "--model",
            str(assets / "model"),
            "--data",
            str(assets / "syn" / "records.jsonl"),
        ],
    }[command]
    holder = hold_in_subprocess(out, "eval")
    try:
        r = _cli(*argv, "--out", str(out))
        one_line_error(r, f"{out}: in use by another run (pid {holder.pid}, started ", ", command eval); "
                       "wait for it or choose another --out")  # fmt: skip
        assert sorted(p.name for p in out.iterdir()) == [".lock"], "nothing written beside the holder"
    finally:
        holder.kill()
        holder.wait()
    if command == "score":  # the killed holder left the file, not the lock
        r = _cli(*argv, "--out", str(out))
        assert r.returncode == 0 and (out / "synthetic" / "results.json").exists(), r.stderr[-2000:]


def test_a_link_planted_at_thumbs_jsonl_is_one_line_and_keeps_the_results(assets, tmp_path):
    """thumbs.jsonl a link to /dev/full: the run stops with one line naming the link, exit 2 (it is
    refused, not written through), and the earlier run's rows and results stay as they were. (A full
    disk while writing it: ``tests/evaluation/test_pipeline.py``.)"""
    out = tmp_path / "out"
    _eval(assets, out, "--max-samples", "2")
    bench = out / "synthetic"
    before = {name: (bench / name).read_bytes() for name in ("predictions.jsonl", "results.json")}
    (bench / "thumbs.jsonl").unlink()
    (bench / "thumbs.jsonl").symlink_to("/dev/full")
    cmd = [
        "eval", "--model", str(assets / "model"), "--benchmarks", "synthetic", "--video-root", str(assets / "syn"),
        "--out", str(out), "--min-pixels", "1024", "--max-pixels", "4096", "--nframes", "4",
        "--max-new-tokens", "5", "--load-workers", "1", "--max-samples", "2",
    ]  # fmt: skip
    r = _cli(*cmd)
    errors = [line for line in r.stderr.splitlines() if line.startswith("easyvideor1")]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert errors == [
        f"easyvideor1 eval: {bench / 'thumbs.jsonl'}: is a symbolic link, not a file this run writes; "
        "remove it or choose another output directory"
    ]
    assert {name: (bench / name).read_bytes() for name in before} == before
    assert (bench / "thumbs.jsonl").is_symlink()


def test_a_cache_dir_that_is_a_file_is_named_before_the_model_loads(assets, tmp_path):
    (tmp_path / "afile").write_text("x\n")
    r = _cli("eval", "--model", str(assets / "model"), "--benchmarks", "synthetic", "--video-root",
             str(assets / "syn"), "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "afile"),
             "--cache-mode", "cache_only")  # fmt: skip
    one_line_error(r, f"cache directory {tmp_path / 'afile'} is not a directory")


@pytest.mark.parametrize("command", ["eval", "score"])
def test_a_foreign_non_empty_out_is_refused_unless_reused(assets, tmp_path, capsys, command):
    """`eval`/`score` replace results.json and report.html: not in a folder no evaluation wrote."""
    argv = ["--benchmarks", "synthetic", "--video-root", str(assets / "syn")]
    if command == "eval":
        argv = ["eval", "--dry-run", *argv]
    else:
        preds = tmp_path / "preds.jsonl"
        preds.write_text(json.dumps({"sample_id": "x", "response": "A"}) + "\n")
        argv = ["score", *argv, "--predictions", str(preds)]
    site = tmp_path / "site"
    site.mkdir()
    mine = {"report.html": "<p>my page</p>", "results.json": '{"mine": 1}', "notes.txt": "n"}
    for name, text in mine.items():
        (site / name).write_text(text)

    assert main([*argv, "--out", str(site)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"--out {site}: not empty" in line and "--reuse-out" in line
    assert {p.name: p.read_text() for p in site.iterdir()} == mine
    # asked to: written there, the user's other files left as they are
    assert main([*argv, "--out", str(site), "--reuse-out"]) == 0
    assert (site / "notes.txt").read_text() == "n" and (site / "synthetic").is_dir()
    # an earlier evaluation's folder needs no flag
    assert main([*argv, "--out", str(tmp_path / "new")]) == 0
    assert main([*argv, "--out", str(tmp_path / "new")]) == 0


def test_conflicting_predictions_for_one_sample_are_refused_naming_it(tmp_path, capsys):
    records = [
        {"problem_id": str(i), "problem": f"Question {i}?", "problem_type": "multiple choice",
         "options": ["A. x", "B. y"], "solution": "<answer>A</answer>", "path": "v.mp4"}
        for i in range(2)
    ]  # fmt: skip
    ann = tmp_path / "ann"
    ann.mkdir()
    (ann / "livesports3k_qa.json").write_text(json.dumps(records))
    argv = ["--benchmarks", "livesports3k_qa", "--annotations", str(ann)]
    assert main(["eval", "--dry-run", *argv, "--out", str(tmp_path / "dry")]) == 0
    first, second = (p["sample_id"] for p in _rows(tmp_path / "dry" / "livesports3k_qa" / "prompts.jsonl"))
    preds = tmp_path / "p.jsonl"
    rows = [(first, "<answer>A</answer>"), (second, "<answer>A</answer>"), (first, "<answer>A</answer>")]
    preds.write_text("".join(json.dumps({"sample_id": i, "response": r}) + "\n" for i, r in rows))
    assert main(["score", *argv, "--predictions", str(preds), "--out", str(tmp_path / "same")]) == 0
    with preds.open("a") as f:  # the same sample answered otherwise
        f.write(json.dumps({"sample_id": first, "response": "<answer>B</answer>"}) + "\n")
    capsys.readouterr()
    assert main(["score", *argv, "--predictions", str(preds), "--out", str(tmp_path / "other")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "Traceback" not in error
    assert f"line 4: sample '{first}' of livesports3k_qa has another response at {preds}: line 3" in error
