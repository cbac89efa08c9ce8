"""FSDP2 on 2 ranks for the families beyond Qwen-VL attention (test_distributed): Qwen3.5's hybrid
decoder (gated-DeltaNet linear-attention and full-attention layers, sharded per
``_no_split_modules``), GLM-4.1V (its own vision tower, 3-D RoPE and placeholder masks) and
InternVL3.5 (one tower call per forward for tiles and frames together, so a text-only rank makes
one dummy call; 1-D RoPE). Every modality pair completes with the dummy vision pass, and a 2-rank
update equals the 1-process one."""

from __future__ import annotations

import json

import pytest

from easyvideor1.models.tiny import make_tiny_model

from .test_distributed import (  # noqa: F401 (records: a fixture)
    HERE,
    _load_base,
    _torchrun,
    assert_same_update,
    records,
    single_and_two_ranks,
)

pytestmark = pytest.mark.slow


# the weights of each family's own parts, which the update must move
OWN_PARTS = {
    "qwen3_5": ("linear_attn",),
    "glm4v": ("visual.blocks",),
    "internvl": ("vision_tower", "multi_modal_projector"),
}
_MODELS: dict[str, str] = {}


def _model(family: str, tmp_path_factory) -> str:
    if family not in _MODELS:
        _MODELS[family] = make_tiny_model(str(tmp_path_factory.mktemp(family) / "model"), family)
    return _MODELS[family]


@pytest.fixture(scope="module", params=list(OWN_PARTS))
def family_model(request, tmp_path_factory) -> tuple[str, str]:
    return request.param, _model(request.param, tmp_path_factory)


def test_every_modality_pair_across_two_ranks_completes(family_model, records, tmp_path):  # noqa: F811
    out = tmp_path / "pairs.json"
    r = _torchrun(2, str(HERE / "dist_worker.py"), "modalities", family_model[1], records, str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    pairs = json.loads(out.read_text())
    assert len(pairs) == 16 and ["video", "text"] in pairs and ["text", "mixed"] in pairs


def test_two_rank_update_equals_single_process_update(family_model, records, tmp_path):  # noqa: F811
    family, model = family_model
    one, two = single_and_two_ranks("update", model, records, tmp_path)
    assert_same_update(one, two)
    w1 = one[0]
    base = _load_base(model)
    # the family's own layers moved: the hybrid model's linear attention, the vision towers
    own = [k for k in w1 if any(part in k for part in OWN_PARTS[family])]
    assert own, f"the {family} model's own layers are in the update"
    assert max(float((w1[k] - base[k]).abs().max()) for k in own if k in base) > 1e-6


def test_internvl_packed_two_rank_update_equals_single_process(records, tmp_path, tmp_path_factory):  # noqa: F811
    """Padding-free micro-batches of a grid-less family (1-D positions restarting per sequence,
    pixel rows passed through) under FSDP: the 2-rank update equals the 1-process one."""
    one, two = single_and_two_ranks(
        "update", _model("internvl", tmp_path_factory), records, tmp_path, "--packed"
    )
    assert_same_update(one, two)
