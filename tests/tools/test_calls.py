"""Whatever the policy writes, a call gets a one-line result and the episode goes on (issue item
"bad calls never crash"): each kind of bad call, its status, and the episode's counts."""

from __future__ import annotations

import time

import pytest

from easyvideor1.models.families import get_family
from easyvideor1.tools import TOOLS, ToolResult, ToolsConfig, UnknownToolError, load_tool_files, register_tool
from easyvideor1.tools.base import tool_specs
from easyvideor1.tools.calls import INVALID, OK, EpisodeTools, parse_call
from easyvideor1.tools.session import ToolSession


@register_tool("explode", description="always fails", parameters={"type": "object", "properties": {}})
def _explode(ctx, args):
    raise RuntimeError("disk on fire")


@register_tool("hang", description="never returns in time", parameters={"type": "object", "properties": {}})
def _hang(ctx, args):
    time.sleep(3)
    return ToolResult(text="late")


@register_tool("wrong_type", description="returns a string", parameters={"type": "object", "properties": {}})
def _wrong_type(ctx, args):
    return "not a result"


def _episode(counting_video, names=("seek", "zoom", "explode", "hang", "wrong_type"), **settings):
    cfg = ToolsConfig(names=list(names), timeout_s=0.5, **settings)
    return EpisodeTools(tool_specs(cfg), ToolSession(cfg, "qwen3_vl"), {"id": "r"}, [counting_video], cfg)


def _call(name, **args):
    import json

    return json.dumps({"name": name, "arguments": args})


@pytest.mark.parametrize(
    "body,status,message",
    [
        ('{"name": "seek", "arguments": {"start_s": 1', INVALID, "not valid JSON"),
        ('["seek", 1, 2]', INVALID, "must be a JSON object"),
        ('{"name": "seek", "arguments": [1, 2]}', INVALID, "arguments must be a JSON object"),
        (_call("teleport", where="moon"), INVALID, "unknown tool 'teleport'; the tools are: seek, zoom"),
        (_call("seek", start_s="one", end_s=2), INVALID, "argument start_s: 'one' is not of type 'number'"),
        (_call("seek", end_s=2), INVALID, "'start_s' is a required property"),
        (_call("seek", start_s=1, end_s=2, speed=3), INVALID, "Additional properties are not allowed"),
        (_call("seek", start_s=100, end_s=200), INVALID, "start_s 100 s is outside the video"),
        (_call("seek", start_s=3, end_s=1), INVALID, "must be after start_s"),
        (_call("zoom", time_s=1, box=[0, 0, 5e9, 5e9]), INVALID, "box must satisfy"),
        (_call("zoom", time_s=1, box=[0, 0, 10]), INVALID, "is too short"),
        (_call("explode"), "error", "explode failed: RuntimeError: disk on fire"),
        (_call("hang"), "error", "hang timed out after 0.5 s"),
        (_call("wrong_type"), "error", "returned str, not a ToolResult"),
        (
            '{"name": "seek", "arguments": {"start_s": 1, "end_s": NaN}}',
            INVALID,
            "NaN is not a finite number",
        ),
        ('{"name": "seek", "arguments": {"start_s": 1, "end_s": 1e999}}', INVALID, "1e999 is not a finite"),
        (_call("seek", start_s=1, end_s=float("-inf")), INVALID, "-Infinity is not a finite number"),
        (
            '{"name": "zoom", "arguments": {"box": ' + "[" * 1200 + "]" * 1200 + "}}",
            INVALID,
            "nested 1202 deep",
        ),
        ('{"name": "zoom", "arguments": "' + "[" * 1200 + "]" * 1200 + '"}', INVALID, "nested 1200 deep"),
        (
            '{"name": "seek", "arguments": {"start_s": 1, "end_s": 2, "note": "[[[[{{{{' + "[" * 40 + '"}}',
            INVALID,
            "Additional properties",
        ),
    ],
)
def test_every_bad_call_gets_a_short_error_result(counting_video, body, status, message):
    episode = _episode(counting_video)
    (outcome,) = episode.run_turn([body])
    assert outcome.status == status
    assert outcome.result.text.startswith("error: ") and message in outcome.result.text
    assert "\n" not in outcome.result.text and len(outcome.result.text) < 300
    assert outcome.result.frames == 0


def test_call_and_frame_budgets_and_counts(counting_video):
    episode = _episode(counting_video, max_calls_per_turn=2, max_frames_per_episode=6, max_frames_per_call=4)
    seek = _call("seek", start_s=0, end_s=6, num_frames=4)
    first = episode.run_turn([seek, _call("seek", start_s=1, end_s=5, num_frames=4), seek])
    assert [o.status for o in first] == [OK, OK, INVALID]
    assert [o.result.frames for o in first] == [4, 2, 0]  # the episode had 2 frames left
    assert "at most 2 calls per turn" in first[2].result.text
    (spent,) = episode.run_turn([seek])
    assert spent.status == INVALID and "frame budget (6) is spent" in spent.result.text
    (late,) = episode.run_turn([seek], allowed=False)
    assert "no tool turns left" in late.result.text
    assert episode.counts() == {"calls": 5, "invalid_calls": 3, "errors": 0}


def test_repeated_calls_are_answered_from_the_session(counting_video):
    cfg = ToolsConfig(names=["seek"])
    session = ToolSession(cfg, "qwen3_vl")
    a = EpisodeTools(tool_specs(cfg), session, {}, [counting_video], cfg).run_turn(
        [_call("seek", start_s=1, end_s=3)]
    )
    b = EpisodeTools(tool_specs(cfg), session, {}, [counting_video], cfg).run_turn(
        [_call("seek", start_s=1, end_s=3)]
    )
    assert session.hits == 1 and a[0].result is b[0].result


def test_qwen_calls_are_split_from_the_turn_text():
    family = get_family("qwen3_vl")
    text = (
        'I will look closer.\n<tool_call>\n{"name": "seek", "arguments": {"start_s": 1, "end_s": 2}}\n'
        '</tool_call>\n<tool_call>\n{"name": "zoom", "arguments": {"time_s": 1, "bo'
    )
    content, bodies = family.tokens.split_tool_calls(text)
    assert content == "I will look closer."
    assert parse_call(bodies[0]) == ("seek", {"start_s": 1, "end_s": 2}, None)
    assert parse_call(bodies[1])[2].startswith("the call is not valid JSON")  # cut mid-call: still a call
    assert family.tokens.split_tool_calls("<answer>B</answer>") == ("<answer>B</answer>", [])


def test_arguments_as_a_json_string_are_accepted():
    assert parse_call('{"name": "seek", "arguments": "{\\"start_s\\": 1}"}') == ("seek", {"start_s": 1}, None)


def test_a_user_tool_is_one_file(tmp_path, counting_video):
    path = tmp_path / "my_tools.py"
    path.write_text(
        "from easyvideor1.tools import ToolResult, register_tool\n\n"
        "@register_tool('duration', description='Length of the video in seconds.',\n"
        "               parameters={'type': 'object', 'properties': {}})\n"
        "def duration(ctx, args):\n"
        "    return ToolResult(text=f'{ctx.video.duration:.1f} s')\n"
    )
    cfg = ToolsConfig(names=["duration"], tool_files=[str(path)])
    load_tool_files(cfg.tool_files)  # twice: idempotent
    episode = EpisodeTools(tool_specs(cfg), ToolSession(cfg, "qwen3_vl"), {}, [counting_video], cfg)
    (outcome,) = episode.run_turn([_call("duration")])
    assert outcome.status == OK and outcome.result.text == "6.0 s"
    assert episode.schemas()[0]["function"]["name"] == "duration"


def test_config_errors_name_the_key():
    with pytest.raises(UnknownToolError, match="teleport"):
        tool_specs(ToolsConfig(names=["teleport"]))
    with pytest.raises(ValueError, match="tools.max_turns must be >= 1"):
        ToolsConfig(names=["seek"], max_turns=0)
    with pytest.raises(ValueError, match="must be an identifier"):
        register_tool("two words", description="", parameters={"type": "object"})
    with pytest.raises(ValueError, match='"type": "object"'):
        register_tool("t", description="", parameters={"type": "string"})
    assert "seek" in TOOLS and "frame_at" in TOOLS


def test_a_session_keeps_a_bounded_number_of_videos(counting_video):
    cfg = ToolsConfig(names=["seek"])
    session = ToolSession(cfg, "qwen3_vl", max_sources=2)
    for k in range(5):  # five "videos" (the same file under five names)
        session.context({}, [f"{counting_video}?{k}"], 4)
        assert len(session._sources) <= 2
    session.episode({}, [counting_video]).run_turn([_call("seek", start_s=1, end_s=3)])
    assert session._answers
    session.clear()
    assert not session._sources and not session._answers
