"""The training prompt: question, options block, and the instruction of the record's reward task."""

from __future__ import annotations

import pytest

from easyvideor1.data.prompt import PromptError, format_question, prompt_template
from easyvideor1.data.records import Record
from easyvideor1.rewards import answer_instruction


def _record(problem_type: str, options: list[str] | None = None) -> Record:
    return Record(problem="What happens?", answer="x", problem_type=problem_type, options=options)


@pytest.mark.parametrize(
    "problem_type", ["mcq", "tvg", "stvg", "spatiotemporal_grounding", "SSR", "REC", "ocr"]
)
def test_plain_prompt_ends_with_the_task_instruction(problem_type: str) -> None:
    options = ["A. red", "B. green", "C. blue"] if problem_type == "mcq" else None
    text = format_question(_record(problem_type, options), "plain")
    assert text.endswith("\n" + answer_instruction(problem_type, options))
    assert text.startswith("What happens?")


def test_options_block_and_letter_range() -> None:
    text = format_question(_record("multiple choice", ["A. red", "B. green", "C. blue"]))
    assert text == (
        "What happens?\nOptions:\nA. red\nB. green\nC. blue\n"
        "Answer with the option's letter (A, B, or C) inside <answer></answer>."
    )


def test_reasoning_template_and_none() -> None:
    record = _record("tvg")
    assert format_question(record, "reasoning").endswith(answer_instruction("tvg", reasoning=True))
    assert format_question(record, "none") == "What happens?"
    with pytest.raises(ValueError, match="unknown prompt template"):
        format_question(record, "fancy")


def test_unknown_type_still_renders() -> None:
    assert format_question(_record("astrology")).endswith("Give the final answer inside <answer></answer>.")


# --- one renderer for training, validation and evaluation (issue 20, item 4) -----------------


def _question_prompt(record: Record, reasoning: bool) -> str:
    """The training prompt as the framework has always written it (the reference's formula)."""
    parts = [record.problem.strip()]
    if record.options:
        parts.append("Options:\n" + "\n".join(record.options))
    parts.append(answer_instruction(record.problem_type, record.options, reasoning=reasoning))
    return "\n".join(parts)


@pytest.mark.parametrize("options", [None, ["A. red", "B. green"]])
@pytest.mark.parametrize("problem", ["  What happens?\n", "<video>Where is it?", "Count.\n\nThen say."])
def test_the_template_is_the_training_formula(problem, options) -> None:
    record = Record(
        problem=problem, answer="x", problem_type="multiple choice" if options else "ocr", options=options
    )
    assert format_question(record, "plain") == _question_prompt(record, reasoning=False)
    assert format_question(record, "reasoning") == _question_prompt(record, reasoning=True)
    # eval's thinking style asks the plain template to reason, as the reasoning template does
    assert format_question(record, "plain", "thinking") == format_question(record, "reasoning")


def test_the_benchmark_prompt_text() -> None:
    mc = Record(
        problem="<image 1> Which?", answer="A", problem_type="multiple choice", options=["A. x", "B. y"]
    )
    assert format_question(mc, "benchmark") == (
        "Select the best answer to the following multiple-choice question based on the video.\n"
        "Question: <image> Which?\nOptions:\nA. x\nB. y\n"
        "Answer with the option's letter (A or B) inside <answer></answer>."
    )
    open_ended = Record(problem="", answer="a cat", problem_type="free-form")
    assert format_question(open_ended, "benchmark", "thinking").startswith(
        "Answer the following question based on the video.\nQuestion: Describe the video in detail.\nFirst think"
    )


def test_thinking_follows_the_template() -> None:
    assert [prompt_template(n).thinking() for n in ("plain", "reasoning", "none", "benchmark")] == [
        False, True, None, False,
    ]  # fmt: skip
    assert prompt_template("benchmark").thinking("thinking") is True
    assert prompt_template("plain").thinking("direct", override=True) is True


def test_a_jinja_file_sees_the_record_but_not_its_answer(tmp_path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text("{{ clip_note }}: {{ question }} [{{ options | join(',') }}] {{ instruction }}\n")
    record = Record(problem="Why?", answer="B", problem_type="multiple choice", options=["A. a", "B. b"],
                    extra={"clip_note": "late"})  # fmt: skip
    assert format_question(record, str(path)) == (
        "late: Why? [A. a,B. b] " + answer_instruction("multiple choice", ["A. a", "B. b"])
    )
    leak = tmp_path / "leak.jinja"
    leak.write_text("{{ answer }}")
    with pytest.raises(PromptError, match=r"leak.jinja: record .*answer.*withheld"):
        format_question(record, str(leak))
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% if %}")
    with pytest.raises(PromptError, match=r"broken.jinja: Jinja syntax error on line 1"):
        format_question(record, str(broken))


@pytest.mark.parametrize(
    "source, why",
    [
        ("{{ ''.__class__.__mro__ }}", "access to attribute '__class__'"),
        ("{{ cycler.__init__.__globals__ }}", "access to attribute '__init__'"),
        ("{% include '/etc/passwd' %}", "no loader"),
        ("{% for i in range(10**15) %}x{% endfor %}", "range() of 1,000,000,000,000,000 items"),
        ("{{ problem * 10**9 }}", "operator '*'"),
    ],
)
def test_a_jinja_file_runs_in_the_sandbox(tmp_path, source, why) -> None:
    """A ``.jinja`` prompt file renders in the sandboxed, bounded environment: one line naming it."""
    path = tmp_path / "x.jinja"
    path.write_text(source)
    with pytest.raises(PromptError) as e:
        format_question(_record("ocr"), str(path))
    assert str(e.value).startswith(f"prompt template {path}: record ") and why in str(e.value)
    assert "\n" not in str(e.value)


def test_data_prompt_template_is_compiled_at_start_up(tmp_path) -> None:
    from easyvideor1.data.config import DataConfig
    from easyvideor1.errors import ConfigError

    broken = tmp_path / "broken.jinja"
    broken.write_text("{{ question ")
    with pytest.raises(
        ConfigError, match=rf"^data.prompt_template: prompt template {broken}: Jinja syntax error"
    ):
        DataConfig(prompt_template=str(broken))
    with pytest.raises(
        ConfigError, match=r"^data.prompt_template: prompt template not found: .*missing.jinja"
    ):
        DataConfig(prompt_template=str(tmp_path / "missing.jinja"))


@pytest.mark.parametrize(
    "source, why",
    [
        ("{{ category | upper }}", "'category' is undefined"),  # a field these records lack
        ("{{ question }} {{ 1 // (options | length) }}", "ZeroDivisionError"),
        ("{{ question }}", None),
    ],
)
def test_a_template_that_cannot_render_a_record_stops_at_start_up(tmp_path, source, why) -> None:
    """``check_renders`` (``trainer/build.start``, before any model loads) renders the first record
    that reads; a line that does not read is passed over (the data checks name it)."""
    from easyvideor1.data.prompt import check_renders
    from easyvideor1.errors import ConfigError

    template = tmp_path / "t.jinja"
    template.write_text(source)
    data = tmp_path / "train.jsonl"
    data.write_text(
        '{"problem": \n{"problem_id": "p1", "problem": "How many?", "problem_type": "numerical"}\n'
    )
    files = [str(tmp_path / "missing.jsonl"), str(data)]
    if why is None:
        check_renders(str(template), files)
        return
    with pytest.raises(ConfigError) as e:
        check_renders(str(template), files)
    assert str(e.value).startswith(
        f"data.prompt_template: prompt template {template}: record 'p1' ({data}:2)"
    )
    assert why in str(e.value) and "\n" not in str(e.value)
