"""report.html in a real headless browser (Debian's chromium-headless-shell over the DevTools
protocol; see browser.py): a 2,000-sample run made by `score --data` (no model needed), filtered by
verdict, by a breakdown field and by a text search, the counts the page shows read back and checked
against the predictions file, the summary's 95% interval against results.json; then `eval-compare` on two such runs: the page lists exactly the
samples whose verdict changed and the printed table carries the bootstrap interval."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from easyvideor1.evaluation.report_html import read_payload

from .browser import Browser

N = 2000
LETTERS = "ABCD"


def _records(path):
    rows = []
    for i in range(N):
        word = " Look for the zebra." if i % 7 == 0 else ""
        rec = {
            "problem_id": f"q{i:04d}",
            "videos": [f"videos/v{i % 50:02d}.mp4"],
            "data_type": "video",
            "category": f"cat{i % 4}",
        }
        if i % 2 == 0:
            rec.update(
                problem=f"<video>Which colour is object {i}?{word}",
                problem_type="multiple choice",
                options=[f"{c}. colour {k}" for k, c in enumerate(LETTERS)],
                answer=LETTERS[i % 4],
            )
        else:
            rec.update(
                problem=f"<video>How many objects are in clip {i}?{word}",
                problem_type="numerical",
                answer=str(i % 9),
            )
        rows.append(rec)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _responses(path, records, ids, wrong_every):
    """Gold answers, a wrong one every ``wrong_every``-th sample, no answer at all for i % 5 == 3
    (extraction failures) and none written for i % 10 == 9 (failures: missing from the file)."""
    lines = []
    for i, (rec, sid) in enumerate(zip(records, ids, strict=True)):
        if i % 10 == 9:
            continue
        if i % 5 == 3:
            text = "I am not sure."
        elif i % wrong_every == 0:
            text = (
                "<answer>" + ("D" if rec["answer"] != "D" else "A") + "</answer>"
                if i % 2 == 0
                else "<answer>97</answer>"
            )
        else:
            text = f"<answer>{rec['answer']}</answer>"
        lines.append(json.dumps({"sample_id": sid, "response": text}))
    path.write_text("\n".join(lines) + "\n")


def _score(tmp_path, name, records_file, responses):
    out = tmp_path / name
    r = subprocess.run(
        [sys.executable, "-m", "easyvideor1", "score", "--data", str(records_file), "--predictions", str(responses),
         "--out", str(out), "--group-by", "category"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def _set(b: Browser, element: str, value: str) -> None:
    """Choose ``value`` in a <select> the way a user's choice does: the value, then a change event."""
    b.eval(
        f"(() => {{ const s = document.getElementById({element!r}); s.value = {value!r};"
        " s.dispatchEvent(new Event('change', {bubbles: true})); })()"
    )


def _count(b: Browser) -> int:
    return int(b.eval("document.getElementById('shown-count').textContent"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    records = _records(d / "val.jsonl")
    dry = subprocess.run(
        [sys.executable, "-m", "easyvideor1", "eval", "--dry-run", "--data", str(d / "val.jsonl"), "--out", str(d / "dry")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr[-2000:]
    ids = [json.loads(x)["sample_id"] for x in open(d / "dry" / "val" / "prompts.jsonl")]
    _responses(d / "a.jsonl", records, ids, wrong_every=4)
    _responses(d / "b.jsonl", records, ids, wrong_every=6)
    return (
        d,
        records,
        _score(d, "A", d / "val.jsonl", d / "a.jsonl"),
        _score(d, "B", d / "val.jsonl", d / "b.jsonl"),
    )


def _expected(run, records):
    """(verdict, category, question) per sample from predictions.jsonl, by the documented rule."""
    rows = {r["sample_id"]: r for r in map(json.loads, open(run / "val" / "predictions.jsonl"))}
    ids = [json.loads(x)["sample_id"] for x in open(run.parent / "dry" / "val" / "prompts.jsonl")]
    out = []
    for rec, sid in zip(records, ids, strict=True):
        r = rows[sid]
        if r["failed"]:
            v = "failure"
        elif r["extracted"] is None:
            v = "extraction_failure"
        else:
            v = "correct" if r["accuracy"] >= 0.5 else "wrong"
        out.append((v, rec["category"], rec["problem"]))
    return out


def test_report_filters_and_search_in_a_headless_browser(runs, tmp_path):
    d, records, run_a, _ = runs
    expect = _expected(run_a, records)
    assert sum(v == "failure" for v, _, _ in expect) == N // 10, "a sample missing from the file is a failure"
    assert sum(v == "extraction_failure" for v, _, _ in expect) == N // 10 * 2
    page = run_a / "report.html"
    assert page.stat().st_size < 3_000_000
    with Browser() as b:
        b.open(page.as_uri(), "document.getElementById('total-count').textContent === '2000'")
        assert _count(b) == N
        assert b.eval("document.querySelectorAll('#samples .card').length") == 25, (
            "one page rendered, not 2,000"
        )
        counts = b.eval(
            "Object.fromEntries([...document.querySelectorAll('#verdict-counts .vc')]"
            ".map(e => [e.dataset.verdict, +e.dataset.count]))"
        )
        assert counts == {v: sum(x == v for x, _, _ in expect) for v in {x for x, _, _ in expect}}
        # the summary's interval: results.json's, clustered over the 50 videos the questions share
        res = json.loads((run_a / "results.json").read_text())["val"]
        (lo, hi), ci = res["ci95"], "document.querySelector('#summary td.ci')"
        assert res["n_clusters"] == 50 and res["stderr_clustered"] != res["stderr"] and lo < res["score"] < hi
        assert b.eval(f"{ci}.textContent") == f"[{100 * lo:.2f}, {100 * hi:.2f}]"
        assert "clustered over 50 videos" in b.eval(f"{ci}.title")
        assert f"[{100 * lo:.2f}, {100 * hi:.2f}]" in (run_a / "results.md").read_text()

        _set(b, "f-verdict", "wrong")
        wrong = [e for e in expect if e[0] == "wrong"]
        assert _count(b) == len(wrong) > 0
        _set(b, "f-field", "category")
        _set(b, "f-value", "cat2")
        assert _count(b) == sum(c == "cat2" for _, c, _ in wrong)
        _set(b, "f-value", "")
        b.eval("document.getElementById('f-search').focus()")
        b.insert_text("ZEBRA")  # case-insensitive, typed as a user types
        n = sum("zebra" in q for _, _, q in wrong)
        assert 0 < _count(b) == n
        assert b.eval("document.getElementById('page-info').textContent") == f"page 1 / {-(-n // 25)}"
        shown = b.eval("[...document.querySelectorAll('#samples .card')].map(c => c.className)")
        assert shown and all(c == "card wrong" for c in shown)
        b.screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_lists_the_changed_samples_with_a_bootstrap_interval(runs, tmp_path):
    d, records, run_a, run_b = runs
    r = subprocess.run(
        [sys.executable, "-m", "easyvideor1", "eval-compare", str(run_a), str(run_b), "--out", str(tmp_path / "c.html")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    va, vb = (_expected(run, records) for run in (run_a, run_b))
    changed = sum(x[0] != y[0] for x, y in zip(va, vb, strict=True))
    assert changed > 0
    line = next(x for x in r.stdout.splitlines() if x.startswith("| val |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    score_a, score_b = (
        json.loads((run / "results.json").read_text())["val"]["score"] for run in (run_a, run_b)
    )
    assert cells[3] == f"{100 * (score_b - score_a):+.2f}" and int(cells[6]) == changed
    lo, hi = (float(x) for x in cells[4].strip("[]").split(","))
    assert lo < 100 * (score_b - score_a) < hi
    assert "| val / multiple choice |" in r.stdout and "| val / numerical |" in r.stdout
    assert len(read_payload(str(tmp_path / "c.html"))["rows"]) == changed
    with Browser() as b:
        b.open(
            (tmp_path / "c.html").as_uri(),
            f"document.getElementById('total-count').textContent === '{changed}'",
        )
        assert _count(b) == changed
        _set(b, "f-verdict", "correct")  # B's verdict: every sample B got right that A did not
        assert _count(b) == sum(x[0] != "correct" and y[0] == "correct" for x, y in zip(va, vb, strict=True))
