"""The teacher's privileged view of a prompt (``data/privileged.py``)."""

from __future__ import annotations

import pytest

from easyvideor1.data.dataset import MediaSample
from easyvideor1.data.privileged import privileged_context
from easyvideor1.data.prompt import PromptError
from easyvideor1.data.records import Record
from easyvideor1.errors import ConfigError


def sample(answer: str = "B") -> MediaSample:
    record = Record(
        problem="<video>What colour is the square?", answer=answer, problem_id="q1", source="f.jsonl:1"
    )
    return MediaSample(record, [{"type": "video"}, {"type": "text", "text": "What colour is the square?"}])


def test_the_answer_is_appended_after_the_students_content_and_media_stay_in_place():
    (view,) = privileged_context("answer").samples([sample("B. blue")])
    assert view.content[:2] == sample().content  # the student's turn, unchanged, media where they were
    assert view.content[2]["type"] == "text" and "B. blue" in view.content[2]["text"]
    assert "B. blue" not in str(sample("B. blue").content)  # the student's own view never holds it


def test_a_jinja_context_renders_the_records_fields_in_the_sandbox(tmp_path):
    path = tmp_path / "hint.jinja"
    path.write_text("Reference ({{ record.problem_id }}): {{ answer | upper }} to {{ question }}")
    (view,) = privileged_context(str(path)).samples([sample("b")])
    assert view.content[-1]["text"] == "Reference (q1): B to What colour is the square?"
    unsafe = tmp_path / "unsafe.jinja"
    unsafe.write_text("{{ ''.__class__.__mro__ }}")
    with pytest.raises(
        PromptError, match=r"algorithm.distill.context .*unsafe.jinja: record 'q1' \(f.jsonl:1\)"
    ):
        privileged_context(str(unsafe)).samples([sample()])


@pytest.mark.parametrize(
    "source, text, fragment",
    [
        ("missing.jinja", None, "algorithm.distill.context: template not found: missing.jinja"),
        ("broken.jinja", "{{ answer ", "Jinja syntax error on line 1"),
        ("answer.txt", None, "use answer, none or a .jinja file"),
    ],
)
def test_a_context_that_cannot_render_is_refused_at_start_up(tmp_path, monkeypatch, source, text, fragment):
    monkeypatch.chdir(tmp_path)
    if text is not None:
        (tmp_path / source).write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        privileged_context(source)
