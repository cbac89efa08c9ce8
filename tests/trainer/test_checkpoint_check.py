"""A checkpoint another model wrote, or a hand-edited trainer state, is refused before any tensor is
loaded, naming the file and what differs (``trainer/checkpoint_check.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easyvideor1.trainer.checkpoint_check import CheckpointError, check_same_model, verify_checkpoint

QWEN = {
    "model_type": "qwen2_5_vl",
    "text_config": {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 1000},
    "vision_config": {"depth": 2, "hidden_size": 32},
}


def _checkpoint(root: Path, state: dict, config: dict | None = None) -> Path:
    ckpt = root / "step_1"
    (ckpt / "sharded").mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    if config is not None:
        (ckpt / "config.json").write_text(json.dumps(config))
    return ckpt


@pytest.mark.parametrize(
    ("run_model", "message"),
    [
        ({**QWEN, "model_type": "qwen3_vl"}, "is a qwen2_5_vl model, this run's model.path is qwen3_vl"),
        (
            {**QWEN, "text_config": {**QWEN["text_config"], "hidden_size": 128}},
            r"parameter shapes differ .*\(text_config.hidden_size 64 -> 128\)",
        ),
    ],
)
def test_a_checkpoint_of_another_model_is_refused_naming_what_differs(tmp_path, run_model, message) -> None:
    ckpt = _checkpoint(tmp_path, {"step": 1}, QWEN)
    check_same_model(ckpt, QWEN)  # the model it was trained from
    with pytest.raises(CheckpointError, match=r"step_1/config.json: .*" + message):
        check_same_model(ckpt, run_model)


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (-9, "step must be >= 0, got -9"),
        (1.5, r"not a trainer state \(no integer 'step'\)"),
        (True, "not a trainer state"),
    ],
)
def test_a_hand_edited_step_is_refused_naming_the_file(tmp_path, step, message) -> None:
    ckpt = _checkpoint(tmp_path, {"step": step})
    with pytest.raises(CheckpointError, match=f"step_1/trainer_state.json: {message}"):
        verify_checkpoint(ckpt)
