"""`--benchmark-file SPEC.yaml`: a benchmark defined in YAML round-trips to the built-in spec it restates
(same prompts, same predictions, same score and breakdown, one real tiny-model run), shows in
`eval --list`, and every mistake in the file is an error naming the key."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from easyvideor1.cli import main
from easyvideor1.data.prompt import PromptError, PromptTemplate
from easyvideor1.data.records import load_records
from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.evaluation import render_prompt
from easyvideor1.evaluation.spec_file import SpecFileError, load_spec_file
from easyvideor1.models.tiny import make_tiny_model

# The README's example, restating the built-in `synthetic` benchmark (generic prompt, accuracy by task)
SPEC = """\
name: my-synth
annotation: syn/records.jsonl      # relative to this file
video_dir: ""                      # the videos are under --video-root itself
metric: accuracy
breakdowns: {by_task: problem_type}
max_new_tokens: 1024
prompt: |
  {% if options %}Select the best answer to the following multiple-choice question based on the video.
  Question: {{ question }}
  Options:
  {{ options | join("\\n") }}{% else %}Answer the following question based on the video.
  Question: {{ question }}{% endif %}
  {{ instruction }}
"""


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("specfile")
    write_synthetic_set(str(d / "syn"), 2, size=(64, 48), duration=(1.0, 1.5))
    make_tiny_model(str(d / "model"))
    (d / "spec.yaml").write_text(SPEC)
    return d


def _rows(path):
    return {r["sample_id"]: r for r in map(json.loads, open(path)) if r}


def test_yaml_benchmark_round_trips_to_the_builtin_spec(assets, tmp_path):
    records = load_records(str(assets / "syn" / "records.jsonl"))
    spec = load_spec_file(str(assets / "spec.yaml"))
    for style in ("direct", "thinking"):
        assert [spec.build_prompt(r, style) for r in records] == [render_prompt(r, style) for r in records]
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "easyvideor1", "eval", "--model", str(assets / "model"),
        "--benchmarks", "synthetic", "--benchmark-file", str(assets / "spec.yaml"),
        "--video-root", str(assets / "syn"), "--out", str(out),
        "--nframes", "4", "--min-pixels", "1024", "--max-pixels", "4096", "--max-new-tokens", "8",
        "--load-workers", "1",
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    builtin, mine = (_rows(out / name / "predictions.jsonl") for name in ("synthetic", "my-synth"))
    assert len(builtin) == len(records) and builtin.keys() == mine.keys()
    assert {k: v["prediction"] for k, v in builtin.items()} == {k: v["prediction"] for k, v in mine.items()}
    results = json.loads((out / "results.json").read_text())
    keys = ("score", "by_task", "samples", "evaluated", "failures", "extraction_failures", "metric")
    assert {k: results["synthetic"][k] for k in keys} == {k: results["my-synth"][k] for k in keys}
    assert results["synthetic"]["settings"] == results["my-synth"]["settings"]


def test_list_shows_the_yaml_benchmark_and_score_reads_it(assets, tmp_path, capsys):
    assert main(["eval", "--list", "--benchmark-file", str(assets / "spec.yaml")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("my-synth "))
    assert "records.jsonl" in line and "accuracy" in line and "yes (spec.yaml)" in line
    # dry-run + gold responses through `score`: a perfect score, broken down by task
    argv = ["--benchmark-file", str(assets / "spec.yaml"), "--video-root", str(assets / "syn")]
    assert main(["eval", "--dry-run", *argv, "--out", str(tmp_path / "dry")]) == 0
    prompts = [json.loads(x) for x in open(tmp_path / "dry" / "my-synth" / "prompts.jsonl")]
    gold = tmp_path / "gold.jsonl"
    gold.write_text(
        "".join(
            json.dumps({"sample_id": p["sample_id"], "response": f"<answer>{p['answer']}</answer>"}) + "\n"
            for p in prompts
        )
    )
    assert main(["score", *argv, "--predictions", str(gold), "--out", str(tmp_path / "sc")]) == 0
    res = json.loads((tmp_path / "sc" / "my-synth" / "results.json").read_text())
    assert res["score"] == 1.0 and set(res["by_task"].values()) == {1.0}


@pytest.mark.parametrize(
    "text, key, why",
    [
        ("name: x\n", "annotation", "required"),
        ("annotation: a.jsonl\n", "name", "required"),
        ("name: x\nannotation: a.jsonl\nmetrc: accuracy\n", "metrc", "unknown key"),
        ("name: x\nannotation: a.jsonl\nmetric: f1\n", "metric", "'f1' is not one of accuracy"),
        ("name: x\nannotation: a.jsonl\nmetric: macro_accuracy\n", "macro_over", "exactly when"),
        ("name: x\nannotation: a.jsonl\nmax_new_tokens: 0\n", "max_new_tokens", "positive integer"),
        ("name: x\nannotation: a.jsonl\nbreakdowns: 3\n", "breakdowns", "list of field names"),
        ("name: x\nannotation: a.jsonl\nprompt: '{% if %}'\n", "prompt", "Jinja syntax error"),
        ("name: My Bench\nannotation: a.jsonl\n", "name", "lower-case"),
    ],
)
def test_spec_file_errors_name_the_key(tmp_path, text, key, why):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecFileError) as e:
        load_spec_file(str(path))
    assert f"key {key!r}" in str(e.value) and why in str(e.value) and str(path) in str(e.value)


def test_cli_errors_for_a_clash_a_missing_field_and_a_template_error(assets, tmp_path, capsys):
    clash = tmp_path / "clash.yaml"
    clash.write_text("name: videomme\nannotation: a.jsonl\n")
    assert main(["eval", "--list", "--benchmark-file", str(clash)]) == 2
    assert "key 'name': 'videomme' is already a benchmark (built in)" in capsys.readouterr().err
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        f"name: typo-bench\nannotation: {assets / 'syn' / 'records.jsonl'}\nbreakdowns: [durashun]\n"
    )
    assert main(["eval", "--dry-run", "--benchmark-file", str(typo), "--out", str(tmp_path / "o")]) == 2
    assert "breakdown field 'durashun' is in no record" in capsys.readouterr().err
    leak = tmp_path / "leak.yaml"
    leak.write_text(
        f"name: leak-bench\nannotation: {assets / 'syn' / 'records.jsonl'}\nprompt: '{{{{ record.answer }}}}'\n"
    )
    assert main(["eval", "--dry-run", "--benchmark-file", str(leak), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "key 'prompt'" in err and "answer" in err, "a template cannot read the answer"


def test_a_spec_file_template_renders_with_the_training_variables(assets, tmp_path):
    """A spec file's `prompt` is rendered by the one renderer: the same variables a training
    ``.jinja`` template gets, and its syntax errors name the file and key."""
    rec = load_records(str(assets / "syn" / "records.jsonl"))[0]
    template = PromptTemplate(
        "{{ problem_type }}|{{ options | length }}|{{ style }}|{{ instruction }}", "spec"
    )
    kind, n, style, instruction = template(rec, "thinking").split("|")
    assert (kind, int(n), style) == (rec.problem_type, len(rec.options), "thinking")
    assert instruction.startswith("First think")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"name: bad-bench\nannotation: {assets / 'syn' / 'records.jsonl'}\nprompt: '{{{{ question '\n"
    )
    with pytest.raises(SpecFileError, match=r"bad.yaml: key 'prompt': Jinja syntax error on line 1"):
        load_spec_file(str(bad))


@pytest.mark.parametrize(
    "prompt, why",
    [
        ("{{ cycler.__init__.__globals__.os.popen('id').read() }}", "attribute '__init__'"),
        ("{% include '/etc/passwd' %}", "no loader"),
        ("{% for i in range(10**15) %}{{ question }}{% endfor %}", "range() of"),
        ("{{ question * 10**9 }}", "operator '*'"),
    ],
)
def test_a_shared_spec_files_prompt_runs_in_the_sandbox(assets, tmp_path, prompt, why):
    """A spec file from someone else cannot run a command, read a file or spin: its prompt is
    refused in one line naming the file and key."""
    path = tmp_path / "shared.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "shared", "annotation": str(assets / "syn" / "records.jsonl"), "prompt": prompt}
        )
    )
    spec = load_spec_file(str(path))
    record = load_records(str(assets / "syn" / "records.jsonl"))[0]
    with pytest.raises(PromptError) as e:
        spec.build_prompt(record, "direct")
    assert str(e.value).startswith(f"{path}: key 'prompt': record ") and why in str(e.value)
    assert "\n" not in str(e.value)
