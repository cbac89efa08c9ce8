"""Evaluation with tools (``eval --tools``): every sample is an episode on the real tiny model and
its real videos. The policy's first turn is a scripted tool call (a trained tool-using model is
the demo's); the engine, pipeline, tool calls, rows, results.json and report.html are the real
ones. Also the CLI's one-line refusals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from easyvideor1.config import RunConfig
from easyvideor1.data.config import DataConfig
from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.evaluation import commands
from easyvideor1.evaluation.config import EvalConfig
from easyvideor1.evaluation.report_html import read_payload
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.rollout.base import Responses
from easyvideor1.rollout.hf import HFRolloutEngine
from easyvideor1.tools import ToolsConfig

from ..conftest import one_line_error

SEEK = '<tool_call>\n{"name": "seek", "arguments": {"start_s": 0.2, "end_s": 1.5, "num_frames": 4}}\n</tool_call>'
BAD = '<tool_call>\n{"name": "seek", "arguments": {"start_s": 99, "end_s": 100}}\n</tool_call>'


class FirstTurnScripted(HFRolloutEngine):
    """The real HF engine with the first turn of the first episodes given (``scripts``, in order:
    the pipeline submits samples in order); every other turn is the model's own."""

    def __init__(self, model, processor, scripts: list[str]):
        super().__init__(model, processor, max_batch=1)
        self.scripts = list(scripts)

    def generate(self, batch, repeats, sampling) -> Responses:
        prompt = self.processor.tokenizer.decode(batch.inputs["input_ids"][0])
        if not self.scripts or "<tool_response>" in prompt:  # the model's own turn
            return super().generate(batch, repeats, sampling)
        script = self.scripts.pop(0)
        ids = self.processor.tokenizer(script, add_special_tokens=False)["input_ids"] + [self.eos_ids[0]]
        t = torch.tensor([ids])
        return Responses(ids=t, mask=torch.ones_like(t), texts=[script], truncated=[False])


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("evaltools")
    records = write_synthetic_set(str(d / "S"), 3, size=(64, 48), duration=2.0)
    model = make_tiny_model(str(d / "M"))
    return d, records, model


def test_eval_with_tools_records_turns_calls_and_frames(assets, tmp_path):
    d, records, model_dir = assets
    cfg = RunConfig(
        data=DataConfig(video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=4096),
        eval=EvalConfig(
            data=[records], video_root=str(d / "S"), max_new_tokens=6, batch_size=1, load_workers=1
        ),
        tools=ToolsConfig(names=["seek", "frame_at"], seek_max_pixels=64 * 64),
    )
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    out = tmp_path / "out"
    results = commands.evaluate(
        cfg, model_dir, str(out), served=(FirstTurnScripted(model, processor, [SEEK, BAD]), processor)
    )
    (res,) = results.values()
    predictions = [json.loads(line) for line in open(out / "records" / "predictions.jsonl")]
    assert all("episode" in p for p in predictions) and len(predictions) == res["evaluated"]
    good = next(
        p
        for p in predictions
        if p["episode"]["turns"][0]["calls"] and p["episode"]["turns"][0]["calls"][0]["status"] == "ok"
    )
    (call,) = good["episode"]["turns"][0]["calls"]
    assert (
        call["name"] == "seek" and call["frames"] == 4 and call["thumb"].startswith("data:image/jpeg;base64,")
    )
    assert good["episode"]["tool_turns"] == 1 and len(good["episode"]["turns"]) == 2
    assert good["prediction"] == good["episode"]["turns"][-1]["text"]  # the final turn is what is scored
    assert res["tool_calls_per_sample"] > 0 and 0 < res["tool_call_rate"] <= 1
    bad = next(p for p in predictions if p["index"] == 1)  # the second sample's call: outside the video
    assert bad["episode"]["turns"][0]["calls"][0]["status"] == "invalid" and res["invalid_calls"] >= 1
    assert "outside the video" in bad["episode"]["turns"][0]["calls"][0]["text"]
    assert sum(res["episode_finish"].values()) == res["evaluated"] and res["tool_errors"] == 0
    # the report shows the turns and the frames each call returned
    payload = read_payload(str(out / "report.html"))
    shown = next(r for r in payload["rows"] if r["id"] == good["sample_id"])
    assert shown["tt"][0]["calls"][0]["thumb"] == call["thumb"]
    # the settings digest covers the tools: the same run without them does not reuse these rows
    (plain,) = commands.evaluate(
        RunConfig(data=cfg.data, eval=cfg.eval),
        model_dir,
        str(out),
        served=(HFRolloutEngine(model, processor), processor),
    ).values()
    assert plain["settings"] != res["settings"] and plain["evaluated"] == res["evaluated"]
    assert "tool_calls_per_sample" not in plain


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--tools", "teleport"], "unknown tool 'teleport'"),
    ],
)
def test_eval_refuses_bad_tool_settings_in_one_line(assets, tmp_path, flags, message):
    d, records, model_dir = assets
    cmd = [
        sys.executable,
        "-m",
        "easyvideor1",
        "eval",
        "--model",
        model_dir,
        "--data",
        records,
        "--out",
        str(tmp_path / "o"),
        *flags,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    one_line_error(r, message)
