"""FSDP2 on 2 ranks for the hybrid architecture (Qwen3.5: gated-DeltaNet linear-attention and
full-attention layers, sharded per ``_no_split_modules``): every modality pair completes with the
dummy vision pass, and a 2-rank update equals the 1-process one. (Qwen-VL attention: test_distributed.)"""

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
def qwen3_5(tmp_path_factory) -> str:
    return make_tiny_model(str(tmp_path_factory.mktemp("qwen3_5") / "model"), "qwen3_5")


def test_every_modality_pair_across_two_ranks_completes(qwen3_5, records, tmp_path):  # noqa: F811
    out = tmp_path / "pairs.json"
    r = _torchrun(2, str(HERE / "dist_worker.py"), "modalities", qwen3_5, records, str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    pairs = json.loads(out.read_text())
    assert len(pairs) == 16 and ["video", "text"] in pairs and ["text", "mixed"] in pairs


def test_two_rank_update_equals_single_process_update(qwen3_5, records, tmp_path):  # noqa: F811
    one, two = single_and_two_ranks("update", qwen3_5, records, tmp_path)
    assert_same_update(one, two)
    w1 = one[0]
    base = _load_base(qwen3_5)
    linear = [k for k in w1 if "linear_attn" in k]
    assert linear, "the hybrid model's linear-attention weights are in the update"
    assert max(float((w1[k] - base[k]).abs().max()) for k in linear if k in base) > 1e-5
