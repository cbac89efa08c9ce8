"""A thinking-template model (Qwen3.5) thinks in eval only in the `thinking` style: the `direct`
style (and the non-thinking qwen3_5-official preset) renders the empty think block its processor
renders for enable_thinking=False; `data.thinking` overrides both."""

from __future__ import annotations

import dataclasses

from transformers import AutoProcessor

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import MediaSample, render_text, thinking_mode
from easyvideor1.data.records import Record
from easyvideor1.evaluation.pipeline import eval_data_config
from easyvideor1.models.tiny import make_tiny_model


def test_eval_style_decides_enable_thinking(tmp_path):
    processor = AutoProcessor.from_pretrained(make_tiny_model(str(tmp_path / "m"), "qwen3_5"))
    record = Record(problem="Is the square red?", problem_type="boolean")
    sample = MediaSample(record=record, content=[{"type": "text", "text": record.problem}])
    data = DataConfig(model_family="qwen3_5")

    def opening(cfg: DataConfig) -> str:
        text = render_text(processor, sample, thinking=thinking_mode(cfg))
        return text[text.rindex("<|im_start|>assistant\n") :]

    assert opening(eval_data_config(data, "direct")).endswith("<think>\n\n</think>\n\n")
    assert opening(eval_data_config(data, "thinking")).endswith("assistant\n<think>\n")
    forced = dataclasses.replace(data, thinking=True)
    assert opening(eval_data_config(forced, "direct")).endswith("assistant\n<think>\n")
