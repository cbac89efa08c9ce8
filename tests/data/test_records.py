"""Record loading and validation: formats, aliases, clear errors, benchmark files."""

from __future__ import annotations

import json

import pytest

from easyvideor1.data.records import RecordError, load_records, parse_record
from tests.conftest import ANNOTATIONS


def test_json_jsonl_and_parquet_load_the_same_records(tmp_path):
    rows = [
        {
            "problem": "<video>What colour?",
            "answer": "A",
            "videos": ["a.mp4"],
            "options": ["A. red", "B. blue"],
            "problem_type": "multiple choice",
            "problem_id": 7,
        },
        {
            "problem": "How many?",
            "answer": 3,
            "videos": "b.mp4",
            "fps": 1,
            "max_frames": 16,
            "video_start": 1.5,
            "video_end": 4.0,
            "data_source": "x",
        },
        {"problem": "Text only", "answer": "yes"},
    ]
    (tmp_path / "d.json").write_text(json.dumps(rows))
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    # parquet needs one type per column: normalise the row shapes for it
    prows = [
        {
            **r,
            "answer": str(r["answer"]),
            "videos": [r["videos"]] if isinstance(r.get("videos"), str) else r.get("videos", []),
        }
        for r in rows
    ]
    keys = {k for r in prows for k in r}
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in prows]), tmp_path / "d.parquet")
    loaded = [load_records(str(tmp_path / f"d.{ext}")) for ext in ("json", "jsonl", "parquet")]
    for recs in loaded:
        assert [r.problem_id for r in recs][0] == "7"
        assert recs[1].videos == ["b.mp4"] and recs[1].answer == "3"
        assert (recs[1].fps, recs[1].max_frames, recs[1].video_start, recs[1].video_end) == (
            1.0,
            16,
            1.5,
            4.0,
        )
        assert recs[2].modalities == ("text",) and recs[2].data_type == "text"
    assert loaded[1][1].source.endswith("d.jsonl:2") and loaded[0][1].source.endswith("d.json[1]")
    assert loaded[0][1].extra == {"data_source": "x"}
    assert loaded[2][0].options == ["A. red", "B. blue"] and loaded[2][2].videos == []


def test_inconsistent_types_across_records_are_fine():
    a = parse_record({"problem": "q", "answer": "4", "options": None}, "f[0]")
    b = parse_record({"problem": "q", "answer": 4.5, "options": ["A. x", "B. y"]}, "f[1]")
    c = parse_record({"problem": "q", "answer": {"time": [1, 2]}}, "f[2]")
    assert (a.options, b.answer, json.loads(c.answer)) == (None, "4.5", {"time": [1, 2]})


def test_images_and_videos_together():
    r = parse_record({"problem": "compare", "videos": ["v.mp4"], "images": ["i.png"]}, "f[0]")
    assert r.modalities == ("image", "video")


@pytest.mark.parametrize(
    "raw,field,fragment",
    [
        ({"problem": ["x"]}, "problem", "expected a string"),
        ({"problem": "q", "videos": 5}, "videos", "path or a list"),
        ({"problem": "q", "videos": ["ok.mp4", ""]}, "videos", "item 1"),
        ({"problem": "q", "images": [None]}, "images", "item 0"),
        ({"problem": "q", "options": "A. x"}, "options", "list of strings"),
        ({"problem": "q", "videos": ["v.mp4"], "video_start": 5, "video_end": 2}, "video_end", "after"),
        ({"problem": "q", "video_start": 1}, "video_start", "needs a video"),
        ({"problem": "q", "videos": ["v.mp4"], "fps": -2}, "fps", ">= 0"),
        ({"problem": "q", "videos": ["v.mp4"], "fps": float("nan")}, "fps", "finite"),
        ({"problem": "q", "videos": ["v.mp4"], "max_frames": 2.5}, "max_frames", "positive integer"),
        ({"problem": "q", "answer": None, "offline_output": 12}, None, None),  # numbers become strings
    ],
)
def test_validation_errors_name_the_field(raw, field, fragment):
    if field is None:
        assert parse_record(raw, "data.jsonl:9").offline_output == "12"
        return
    with pytest.raises(RecordError) as e:
        parse_record({"problem_id": "p1", **raw}, "data.jsonl:9")
    msg = str(e.value)
    assert "data.jsonl:9" in msg and "p1" in msg and f"'{field}'" in msg and fragment in msg


def test_bad_lines_are_collected_with_their_line_numbers(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"problem": "ok"}\n{broken\n[1, 2]\n{"problem": "ok too"}\n')
    with pytest.raises(RecordError, match=r"d.jsonl:2: invalid JSON"):
        load_records(str(f))
    errors = []
    assert len(load_records(str(f), errors)) == 2
    assert [e.source.rsplit(":", 1)[1] for e in errors] == ["2", "3"]
    assert "must be a JSON object" in str(errors[1])


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="data file not found"):
        load_records(str(tmp_path / "none.jsonl"))


BENCHMARK_FILES = sorted(p.name for p in ANNOTATIONS.glob("*.json*")) if ANNOTATIONS.exists() else []


@pytest.mark.skipif(not BENCHMARK_FILES, reason="../shared/benchmarks/annotations is not present")
@pytest.mark.parametrize("name", BENCHMARK_FILES)
def test_every_benchmark_annotation_loads(name):
    records = load_records(str(ANNOTATIONS / name))
    assert records
    for r in records:
        assert r.videos, f"{r.source}: no video"
        assert r.answer or r.problem_type == "caption", f"{r.source}: no gold answer"
        assert r.problem_type
    if name == "mvbench.json":
        # solution wins over the option-text answer, which is kept
        assert records[0].answer.startswith("<answer>") and "answer_text" in records[0].extra
    if name == "videommmu_with_image.json":
        assert sum(bool(r.images) for r in records) == 300


def test_a_utf8_bom_is_accepted_in_every_text_format(tmp_path, small_video):
    """Windows tools write a byte-order mark; every line was rejected while preprocess exited 0."""
    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.preprocess import preprocess

    rows = [
        {"problem": "<video>What?", "answer": "A", "videos": [small_video]},
        {"problem": "2+2?", "answer": 4},
    ]
    jsonl, array = tmp_path / "bom.jsonl", tmp_path / "bom.json"
    jsonl.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    array.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows).encode())
    for path in (jsonl, array):
        assert [r.problem for r in load_records(str(path))] == ["<video>What?", "2+2?"]
    cfg = DataConfig(
        model_family="qwen3vl", video_fps=2.0, video_min_pixels=4 * 32 * 32, video_max_pixels=16 * 32 * 32
    )
    report = preprocess([str(jsonl)], cfg, str(tmp_path / "cache"), workers=1, progress=False)
    assert report["built"] == 1 and report["failed"] == 0 and report["bad_records"] == 0


def test_a_directory_is_not_a_data_file(tmp_path):
    with pytest.raises(RecordError, match="is a directory; expected a data file"):
        load_records(str(tmp_path))


# Issue 21: text that is not text is that record's failure, named by file, line and problem_id.
GOOD = '{"problem_id": "g", "problem": "2+2?", "answer": "4"}\n'
DEEP = '{"problem_id": "d", "problem": "q", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n"


def _load_all(path):
    errors = []
    records = load_records(str(path), errors)
    return [r.problem_id for r in records], [str(e) for e in errors]


def test_a_lone_surrogate_anywhere_in_a_record_is_that_records_error(tmp_path):
    """'\\ud800' is valid JSON but no tokenizer, digest or UTF-8 file can take it (item 1)."""
    f = tmp_path / "s.jsonl"
    f.write_text(
        GOOD
        + '{"problem_id": "s1", "problem": "Colour \\ud800?"}\n'
        + '{"problem_id": "s2", "problem": "q", "meta": {"tags": ["x", "a\\udc80"]}}\n'
        + '{"problem_id": "s3", "problem": "q", "options": ["A. \\udfff"]}\n'
        + '{"problem_id": "ok", "problem": "a real pair \\ud83d\\ude00 is fine"}\n'
    )
    ids, errors = _load_all(f)
    assert ids == ["g", "ok"]
    assert errors == [
        f"{f}:2 (problem_id=s1): field 'problem': lone surrogate \\ud800 at character 8 (not valid Unicode)",
        f"{f}:3 (problem_id=s2): field 'meta.tags[1]': lone surrogate \\udc80 at character 2 (not valid Unicode)",
        f"{f}:4 (problem_id=s3): field 'options[0]': lone surrogate \\udfff at character 4 (not valid Unicode)",
    ]
    from easyvideor1.data.records import UnreadableRecord  # the kind training and eval skip

    with pytest.raises(UnreadableRecord, match=r"s.jsonl:2 \(problem_id=s1\): field 'problem'"):
        load_records(str(f))
    # the id itself may be the broken string: the error still prints
    with pytest.raises(RecordError) as e:
        parse_record({"problem_id": "p\ud800", "problem": "q"}, "f.jsonl:1")
    assert str(e.value).encode("utf-8") and "problem_id=p\\ud800" in str(e.value)


def test_json_nested_deeper_than_python_parses_is_that_lines_error(tmp_path):
    """A deeply nested line used to end every reader with a RecursionError traceback (item 3)."""
    f = tmp_path / "deep.jsonl"
    f.write_text(GOOD + DEEP + '{"problem_id": "d2", "problem": "q", "x": ' + "[" * 300 + "]" * 300 + "}\n")
    ids, errors = _load_all(f)
    assert ids == ["g"]
    assert errors == [
        f"{f}:2: nested deeper than Python can parse (too many [ or {{ levels)",
        f"{f}:3 (problem_id=d2): field 'x': nested deeper than 200 levels",
    ]
    array = tmp_path / "deep.json"
    array.write_text("[" + GOOD + "," + DEEP + "]")
    with pytest.raises(RecordError, match=r"deep.json: nested deeper than Python can parse"):
        load_records(str(array))


def test_a_line_that_is_not_utf8_is_that_lines_error_and_parquet_is_read_by_content(tmp_path, small_video):
    """One non-UTF-8 line stopped the whole job naming neither file nor line (item 4)."""
    from easyvideor1.curation.inputs import file_kind
    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.preprocess import preprocess

    f = tmp_path / "latin1.jsonl"
    video = json.dumps({"problem_id": "v", "problem": "<video>What?", "videos": [small_video]})
    f.write_bytes(
        GOOD.encode()
        + b'{"problem_id": "u1", "problem": "caf\xe9?"}\r\n'
        + b"\xff\xfe\n"
        + video.encode()
        + b"\n"
    )
    ids, errors = _load_all(f)
    assert ids == ["g", "v"]
    assert errors == [
        f"{f}:2 (problem_id=u1): not valid UTF-8 (byte 0xe9 at column 37)",
        f"{f}:3: not valid UTF-8 (byte 0xff at column 1)",
    ]
    array = tmp_path / "latin1.json"
    array.write_bytes(b'[{"problem": "ok"},\n {"problem": "caf\xe9"}]')
    with pytest.raises(RecordError, match=r"latin1.json: not valid UTF-8 \(byte 0xe9 at line 2 column 18\)"):
        load_records(str(array))

    # a batch job goes on: the bad lines are counted failures, the video is built
    cfg = DataConfig(
        model_family="qwen3vl", video_fps=2.0, video_min_pixels=4 * 32 * 32, video_max_pixels=16 * 32 * 32
    )
    report = preprocess([str(f)], cfg, str(tmp_path / "cache"), workers=1, progress=False)
    assert report["built"] == 1 and report["bad_records"] == 2
    failures = [json.loads(line) for line in open(tmp_path / "cache" / "failures.jsonl")]
    assert {x["source"] for x in failures} == {f"{f}:2", f"{f}:3"}

    # a Parquet file is Parquet whatever its name; filter writes outputs in the format it reads
    import pyarrow as pa
    import pyarrow.parquet as pq

    misnamed = tmp_path / "table.jsonl"
    pq.write_table(pa.Table.from_pylist([{"problem": "p", "answer": "a", "problem_id": "t"}]), misnamed)
    assert _load_all(misnamed) == (["t"], []) and file_kind(str(misnamed)) == "parquet"
