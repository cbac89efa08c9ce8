"""Every trainable parameter gets a gradient in every micro-batch; the loss is unchanged."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from easyvideor1.media.sampling import SamplingParams
from easyvideor1.media.video import sample_video
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.models.vision import DummyVisionPass
from tests.conftest import make_video


@pytest.fixture(scope="module", params=["qwen3vl", "qwen2_5vl"])
def tiny(request, tmp_path_factory):
    d = make_tiny_model(str(tmp_path_factory.mktemp(request.param)), request.param)
    return AutoModelForImageTextToText.from_pretrained(d), AutoProcessor.from_pretrained(d), request.param


def _inputs(processor, family, kind, video_path):
    content, kwargs = [], {}
    factor = 32 if family == "qwen3vl" else 28
    if kind in ("image", "mixed"):
        content.append({"type": "image"})
        kwargs["images"] = [Image.new("RGB", (2 * factor, 2 * factor), "red")]
    if kind in ("video", "mixed"):
        content.append({"type": "video"})
        v = sample_video(
            video_path,
            SamplingParams(factor=factor, nframes=4, min_pixels=factor**2 * 4, max_pixels=factor**2 * 4),
        )
        from transformers.video_utils import VideoMetadata

        kwargs.update(
            videos=[v.frames],
            video_metadata=[VideoMetadata(**v.processor_metadata())],
            do_sample_frames=False,
        )
    content.append({"type": "text", "text": "What is shown?"})
    text = (
        processor.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
        + "A red square"
    )
    return processor(text=[text], do_resize=False, return_tensors="pt", **kwargs)


@pytest.mark.parametrize("kind,dummy_calls", [("text", 2), ("image", 1), ("video", 1), ("mixed", 0)])
def test_every_parameter_gets_a_gradient_and_loss_is_unchanged(tiny, tmp_path, kind, dummy_calls):
    model, processor, family = tiny
    video = make_video(tmp_path, "v", fps=10, duration=1, size=(64, 64))
    inputs = _inputs(processor, family, kind, video)
    labels = inputs["input_ids"].clone()
    with torch.no_grad():
        plain = model(**inputs, labels=labels).loss
    dummy = DummyVisionPass(model)
    model.zero_grad(set_to_none=True)
    with dummy.expect(inputs):
        loss = model(**inputs, labels=labels).loss
    loss.backward()
    assert dummy.calls == dummy_calls
    torch.testing.assert_close(loss.detach(), plain, rtol=0, atol=0)
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"no gradient for {missing[:5]}"


def test_without_the_dummy_pass_the_vision_tower_gets_no_gradient(tiny, tmp_path):
    model, processor, family = tiny
    inputs = _inputs(processor, family, "text", None)
    model.zero_grad(set_to_none=True)
    model(**inputs, labels=inputs["input_ids"]).loss.backward()
    assert any(p.grad is None for n, p in model.named_parameters() if "visual" in n)  # the test bites
