"""Start-up checks of ``trainer/build.py``: vLLM engine settings that could not follow
``LOCAL_RANK`` under torchrun (every rank's engine would land on one GPU) are refused by key."""

from __future__ import annotations

import pytest

from easyvideor1.config import RunConfig, load_config
from easyvideor1.trainer.build import check_engine_per_rank


@pytest.mark.parametrize(
    "override, message",
    [
        ("rollout.vllm.tensor_parallel_size=2", "tensor_parallel_size=2 under torchrun"),
        ("rollout.vllm.in_process=false", "in_process=false under torchrun"),
    ],
)
def test_engine_settings_that_cannot_follow_local_rank_are_refused(override, message) -> None:
    with pytest.raises(ValueError, match=message):
        check_engine_per_rank(load_config(RunConfig, None, ["rollout.engine=vllm", override]))
    check_engine_per_rank(load_config(RunConfig, None, ["rollout.engine=vllm"]))  # one engine per rank
