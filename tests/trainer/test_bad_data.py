"""Issue 11 item 7: a record whose media cannot be loaded is skipped, listed and counted (or, with
data.strict=true, stops the run naming it), at start-up and at a step, instead of a traceback."""

from __future__ import annotations

import json
import shutil

import pytest

from easyvideor1.trainer.loop import Trainer


def _rows(path):
    return [json.loads(line) for line in open(path)]


@pytest.fixture
def broken_data(demo_assets, tmp_path):
    """Eight demo records: #1's video is missing, #2's is garbage bytes, #3's is cut to 1.5 KiB."""
    rows = [json.loads(line) for line in open(demo_assets["train"])][:8]
    for r in rows:
        r["videos"] = [str(demo_assets["dir"] / "data" / r["videos"][0])]
    rows[1]["videos"] = [str(tmp_path / "gone.mp4")]
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"\x00\x01not a video at all" * 200)
    rows[2]["videos"] = [str(garbage)]
    cut = tmp_path / "cut.mp4"
    shutil.copy(rows[3]["videos"][0], cut)
    with open(cut, "r+b") as f:
        f.truncate(1536)
    rows[3]["videos"] = [str(cut)]
    data = tmp_path / "broken.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def test_training_skips_records_whose_media_cannot_be_loaded(make_cfg, broken_data, tmp_path):
    out = tmp_path / "run"
    common = (f"data.train_files=[{broken_data}]", f"trainer.output_dir={out}", "trainer.max_steps=1")
    Trainer(make_cfg(*common, "data.val_files=[]")).train()
    skipped = _rows(out / "skipped_records.jsonl")
    assert sorted(r["source"] for r in skipped) == [f"{broken_data}:{n}" for n in (2, 3, 4)]
    reasons = {r["source"].rsplit(":", 1)[1]: r["reason"] for r in skipped}
    assert reasons["2"] == f"{tmp_path / 'gone.mp4'}: file not found"
    assert reasons["3"].startswith(f"{tmp_path / 'garbage.mp4'}: cannot decode: ")
    assert reasons["4"].startswith(f"{tmp_path / 'cut.mp4'}: cannot decode: ")
    assert all(r["phase"] == "preflight" and r["split"] == "train" for r in skipped)
    step1 = [m for m in _rows(out / "metrics.jsonl") if m["step"] == 1 and "actor/pg_loss" in m]
    assert step1 and step1[0]["data/skipped_records"] == 3

    from easyvideor1.trainer.skipping import MediaLoadError

    with pytest.raises(MediaLoadError, match=r"broken.jsonl:2 .*not found.*data.strict=true"):
        Trainer(make_cfg(*common, "data.val_files=[]", "data.strict=true"))


def test_fast_preflight_skips_a_corrupt_video_at_its_step(make_cfg, broken_data, tmp_path):
    out = tmp_path / "fast"
    t = Trainer(
        make_cfg(
            f"data.train_files=[{broken_data}]",
            f"trainer.output_dir={out}",
            "data.val_files=[]",
            "data.preflight=fast",
            "trainer.prompts_per_step=8",
            "trainer.mini_batch_prompts=8",
            "rollout.hybrid=always",  # offline answers give the untrained policy a signal
        )
    )
    assert len(t.data.train_idx) == 7  # the missing file is found without decoding anything
    m = t.rl_step()  # all eight records are drawn: two fail to decode here, the step goes on
    assert m["data/skipped_records"] == 3 and m["actor/grad_norm"] > 0
    rows = _rows(out / "skipped_records.jsonl")
    assert [r["phase"] for r in rows] == ["preflight", "step", "step"]
    assert {r["index"] for r in rows[1:]} == {2, 3} and rows[1]["step"] == 1


def test_an_empty_train_file_is_named(make_cfg, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match=f"train file {empty} has no records"):
        Trainer(make_cfg(f"data.train_files=[{empty}]"))


@pytest.mark.slow  # two trainer start-ups (about 15 s here)
def test_training_skips_and_lists_records_whose_text_cannot_be_read(make_cfg, demo_assets, tmp_path):
    """Issue 21: a lone surrogate reached the tokenizer (a TypeError naming no record at preflight),
    a non-UTF-8 line or a too deep one stopped the run. Each is now skipped and listed beside the
    records whose media cannot be loaded, or stops the run naming it with data.strict=true."""
    rows = [json.loads(line) for line in open(demo_assets["train"])][:6]
    for r in rows:
        r["videos"] = [str(demo_assets["dir"] / "data" / r["videos"][0])]
    surrogate = json.dumps({**rows[0], "problem_id": "s1"}).replace('"problem": "', '"problem": "\\ud800', 1)
    data = tmp_path / "text.jsonl"
    data.write_bytes(
        "".join(json.dumps(r) + "\n" for r in rows[:3]).encode()
        + (surrogate + "\n").encode()
        + b'{"problem_id": "u1", "problem": "caf\xe9", "answer": "A"}\n'
        + ('{"problem_id": "d1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n").encode()
        + "".join(json.dumps(r) + "\n" for r in rows[3:]).encode()
    )
    out = tmp_path / "run"
    common = (f"data.train_files=[{data}]", f"trainer.output_dir={out}", "data.val_files=[]")
    t = Trainer(make_cfg(*common))
    assert len(t.data.train_idx) == 6
    skipped = _rows(out / "skipped_records.jsonl")
    assert [(r["source"], r["problem_id"], r["phase"], r["split"]) for r in skipped] == [
        (f"{data}:4", "s1", "preflight", "train"),
        (f"{data}:5", "u1", "preflight", "train"),
        (f"{data}:6", None, "preflight", "train"),
    ]
    assert skipped[0]["reason"].startswith("field 'problem': lone surrogate \\ud800 at character 1")
    assert skipped[1]["reason"] == "not valid UTF-8 (byte 0xe9 at column 37)"
    assert skipped[2]["reason"].startswith("nested deeper than Python can parse")
    assert t.skips.skipped_preflight == 3

    from easyvideor1.trainer.skipping import MediaLoadError

    with pytest.raises(MediaLoadError, match=r"text.jsonl:4 \(problem_id=s1\): field 'problem'.*data.strict"):
        Trainer(make_cfg(*common, "data.strict=true"))
