"""FSDP2 on 2 ranks for InternVL3.5 (one tower call per forward for tiles and frames together, so
a text-only rank makes one dummy call): every modality pair completes, and a 2-rank update equals
the 1-process one. (Qwen-VL: test_distributed; Qwen3.5: test_distributed_qwen3_5.)"""

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


@pytest.fixture(scope="module")
def internvl(tmp_path_factory) -> str:
    return make_tiny_model(str(tmp_path_factory.mktemp("internvl") / "model"), "internvl")


def test_every_modality_pair_across_two_ranks_completes(internvl, records, tmp_path):  # noqa: F811
    out = tmp_path / "pairs.json"
    r = _torchrun(2, str(HERE / "dist_worker.py"), "modalities", internvl, records, str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    pairs = json.loads(out.read_text())
    assert len(pairs) == 16 and ["video", "text"] in pairs and ["text", "mixed"] in pairs


def test_two_rank_update_equals_single_process_update(internvl, records, tmp_path):  # noqa: F811
    one, two = single_and_two_ranks("update", internvl, records, tmp_path)
    assert_same_update(one, two)
    base = _load_base(internvl)
    tower = [k for k in one[0] if "vision_tower" in k or "multi_modal_projector" in k]
    assert tower and max(float((one[0][k] - base[k]).abs().max()) for k in tower if k in base) > 1e-6


def test_packed_two_rank_update_equals_single_process(internvl, records, tmp_path):  # noqa: F811
    """Padding-free micro-batches (1-D positions restarting per sequence, pixel rows passed
    through) under FSDP: the 2-rank update equals the 1-process one."""
    one, two = single_and_two_ranks("update", internvl, records, tmp_path, "--packed")
    assert_same_update(one, two)
