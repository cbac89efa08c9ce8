"""``trainer/resume.py``: a resume from a checkpoint of another model stops at start-up, before any
model is loaded (``check_model_first``, called by ``build.start``), naming the file and what differs."""

from __future__ import annotations

import json

import pytest

from easyvideor1.config import RunConfig, load_config
from easyvideor1.trainer import loop
from easyvideor1.trainer.checkpoint_check import CheckpointError

QWEN2_5 = {"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 64, "num_hidden_layers": 2}}


@pytest.mark.parametrize(
    "model_path, resume, message",
    [
        (
            {**QWEN2_5, "model_type": "qwen3_vl"},
            "auto",
            "is a qwen2_5_vl model, this run's model.path is qwen3_vl",
        ),
        (
            {**QWEN2_5, "text_config": {"hidden_size": 128, "num_hidden_layers": 2}},
            "PATH",
            r"parameter shapes differ .*\(text_config.hidden_size 64 -> 128\)",
        ),
    ],
)
def test_a_checkpoint_of_another_model_stops_the_run_before_any_model_loads(
    tmp_path, monkeypatch, model_path, resume, message
):
    model, out = tmp_path / "model", tmp_path / "run"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(model_path))
    ckpt = out / "checkpoints" / "step_1"  # what a save of a Qwen2.5-VL run leaves
    (ckpt / "sharded").mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 1}))
    (ckpt / "config.json").write_text(json.dumps(QWEN2_5))
    (out / "checkpoints" / "saved.json").write_text(json.dumps({"checkpoints": ["step_1"]}))
    records = tmp_path / "train.jsonl"
    records.write_text(json.dumps({"problem": "2 + 2?", "answer": "4", "problem_type": "numerical"}) + "\n")
    cfg = load_config(
        RunConfig,
        None,
        [
            f"model.path={model}",
            f"data.train_files=[{records}]",
            f"trainer.output_dir={out}",
            f"trainer.resume={ckpt if resume == 'PATH' else resume}",
            "cpu.threads=1",
        ],
    )

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(loop, "build_components", load)
    with pytest.raises(CheckpointError, match=f"{ckpt / 'config.json'}: .*{message}"):
        loop.Trainer(cfg)
