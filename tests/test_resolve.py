"""``resolve_config``: the run config finished once for the model's checkpoint, as a new config."""

from __future__ import annotations

import pytest

from easyvideor1.config import RunConfig, load_config, to_yaml
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.resolve import resolve_config


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return make_tiny_model(str(tmp_path_factory.mktemp("resolve") / "model"), "qwen3vl")


def test_the_checkpoint_names_the_family_in_a_new_config(tiny) -> None:
    cfg = load_config(RunConfig, None, [f"model.path={tiny}", "data.video_nframes=4", "data.video_fps=null"])
    given = to_yaml(cfg)
    finished = resolve_config(cfg)
    assert finished.data.model_family == "qwen3_vl" and finished.data.factor == 32
    assert to_yaml(cfg) == given and cfg.data.model_family is None, "the loaded config is not changed"
    assert to_yaml(resolve_config(finished)) == to_yaml(finished), "resolving again changes nothing"
    # another model for a job (eval --model) names the family of that checkpoint
    assert resolve_config(load_config(RunConfig), tiny).data.model_family == "qwen3_vl"


def test_a_configured_family_is_a_check(tiny) -> None:
    cfg = load_config(RunConfig, None, [f"model.path={tiny}", "data.model_family=qwen3vl"])
    assert resolve_config(cfg).data.model_family == "qwen3vl", "the user's spelling is kept"
    with pytest.raises(ValueError, match="data.model_family is 'qwen2_5_vl'"):
        resolve_config(load_config(RunConfig, None, [f"model.path={tiny}", "data.model_family=qwen2_5_vl"]))
