"""FSDP2 on 2 ranks for the hybrid architecture (Qwen3.5: gated-DeltaNet linear-attention and
full-attention layers, sharded per ``_no_split_modules``): every modality pair completes with the
dummy vision pass, and a 2-rank update equals the 1-process one. (Qwen-VL attention: test_distributed.)"""

from __future__ import annotations

import json
import sys

import pytest

from easyvideor1.models.tiny import make_tiny_model

from .test_distributed import HERE, _load, _load_base, _run, _torchrun, records  # noqa: F401 (fixture)

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
    single, double = tmp_path / "single.safetensors", tmp_path / "double.safetensors"
    args = [str(HERE / "dist_worker.py"), "update", qwen3_5, records]
    r1 = _run([sys.executable, *args, str(single)])
    assert r1.returncode == 0, r1.stderr[-3000:]
    r2 = _torchrun(2, *args, str(double))
    assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-3000:]
    w1, m1 = _load(single)
    w2, m2 = _load(double)
    assert m1["actor/pg_loss"] == pytest.approx(m2["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert m1["actor/grad_norm"] == pytest.approx(m2["actor/grad_norm"], rel=1e-5)
    assert w1.keys() == w2.keys()
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-6
    base = _load_base(qwen3_5)
    linear = [k for k in w1 if "linear_attn" in k]
    assert linear, "the hybrid model's linear-attention weights are in the update"
    assert max(float((w1[k] - base[k]).abs().max()) for k in linear if k in base) > 1e-5
