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
    Launches,
    _load_base,
    assert_same_update,
    records,
)

pytestmark = pytest.mark.slow


# the weights of each family's own parts, which the update must move
OWN_PARTS = {
    "qwen3_5": ("linear_attn",),
    "glm4v": ("visual.blocks",),
    "internvl": ("vision_tower", "multi_modal_projector"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("families")
    return {f: make_tiny_model(str(d / f), f) for f in OWN_PARTS}


@pytest.fixture(scope="module")
def launches(models, records, tmp_path_factory) -> Launches:  # noqa: F811
    """Every family's modality pairs (2 ranks) and update (1 process and 2 ranks), and InternVL's
    packed update: one launch for each number of ranks."""
    updates = [("update", models[f], records, f) for f in OWN_PARTS]
    updates.append(("update", models["internvl"], records, "internvl_packed", "--packed"))
    pairs = [("modalities", models[f], records, f"{f}_pairs.json") for f in OWN_PARTS]
    return Launches(tmp_path_factory.mktemp("runs"), {1: updates, 2: [*pairs, *updates]})


@pytest.fixture(params=list(OWN_PARTS))
def family(request) -> str:
    return request.param


def test_every_modality_pair_across_two_ranks_completes(family, launches):
    pairs = json.loads(launches.output(2, f"{family}_pairs.json").read_text())
    assert len(pairs) == 16 and ["video", "text"] in pairs and ["text", "mixed"] in pairs


def test_two_rank_update_equals_single_process_update(family, models, launches):
    one, two = launches.update(1, family), launches.update(2, family)
    assert_same_update(one, two)
    w1 = one[0]
    base = _load_base(models[family])
    # the family's own layers moved: the hybrid model's linear attention, the vision towers
    own = [k for k in w1 if any(part in k for part in OWN_PARTS[family])]
    assert own, f"the {family} model's own layers are in the update"
    assert max(float((w1[k] - base[k]).abs().max()) for k in own if k in base) > 1e-6


def test_internvl_packed_two_rank_update_equals_single_process(launches):
    """Padding-free micro-batches of a grid-less family (1-D positions restarting per sequence,
    pixel rows passed through) under FSDP: the 2-rank update equals the 1-process one."""
    assert_same_update(launches.update(1, "internvl_packed"), launches.update(2, "internvl_packed"))
