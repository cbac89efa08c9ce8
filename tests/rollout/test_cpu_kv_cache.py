"""vLLM's KV cache on CPUs (``rollout.vllm.cpu_kv_cache_gib``): the auto size against a hand
computation, the user's ``VLLM_CPU_KVCACHE_SPACE`` winning, and sizes that cannot fit refused by
the key. No engine is started: the engine argument is what these functions return."""

from __future__ import annotations

import pytest

from easyvideor1.rollout import cpu_kv_cache
from easyvideor1.rollout.config import VLLMConfig
from easyvideor1.rollout.cpu_kv_cache import ENV, GIB, engine_kv_cache_args, kv_cache_size


@pytest.mark.parametrize(
    "available_gib,ranks,expected",
    [
        (20, 2, 2.5),  # a quarter of 20 GiB, split between 2 ranks
        (10, 3, 0.75),  # 2.5 / 3 = 0.83, rounded down to a quarter GiB
        (3, 2, 0.5),  # 0.375 is under the floor
        (512, 1, 16.0),  # 128 is over the cap
    ],
)
def test_auto_takes_a_quarter_of_the_available_memory_per_rank_within_floor_and_cap(
    available_gib, ranks, expected
):
    size = kv_cache_size("auto", {}, available_gib * GIB, ranks)
    assert size.gib == expected and not size.from_env
    ranks_text = "1 rank" if ranks == 1 else f"{ranks} ranks"
    assert size.line() == (
        f"vLLM on CPU: KV cache {expected:g} GiB (auto: {available_gib:.1f} GiB available, {ranks_text})"
    )


def test_the_engine_argument_under_torchrun_and_the_users_variable_winning(monkeypatch, capsys):
    monkeypatch.setattr(cpu_kv_cache, "available_memory_bytes", lambda: 12 * GIB)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv(ENV, raising=False)
    assert engine_kv_cache_args("auto") == {"kv_cache_memory_bytes": int(1.5 * GIB)}  # 12 / 4 / 2
    assert engine_kv_cache_args("1.25") == {"kv_cache_memory_bytes": int(1.25 * GIB)}
    monkeypatch.setenv(ENV, "3")  # vLLM reads it itself: no engine argument
    assert engine_kv_cache_args("1.25") == {}
    assert capsys.readouterr().err.splitlines() == [
        "vLLM on CPU: KV cache 1.5 GiB (auto: 12.0 GiB available, 2 ranks)",
        "vLLM on CPU: KV cache 1.25 GiB (rollout.vllm.cpu_kv_cache_gib)",
        f"vLLM on CPU: KV cache 3 GiB ({ENV}=3 set in the environment, which wins over "
        "rollout.vllm.cpu_kv_cache_gib)",
    ]
    monkeypatch.setenv(ENV, "lots")
    with pytest.raises(ValueError, match=f"{ENV} must be a whole number of GiB"):
        engine_kv_cache_args("auto")


@pytest.mark.parametrize(
    "setting,available_gib,ranks,message",
    [
        ("8", 10, 2, r"rollout.vllm.cpu_kv_cache_gib=8: 2 vLLM engine\(s\) on this machine need 16 GiB"),
        ("auto", 0.75, 2, r"rollout.vllm.cpu_kv_cache_gib=auto: 2 vLLM engine\(s\) .* need 1 GiB"),
        ("lots", 10, 1, "rollout.vllm.cpu_kv_cache_gib must be 'auto' or a size in GiB > 0"),
        ("0", 10, 1, "rollout.vllm.cpu_kv_cache_gib must be 'auto' or a size in GiB > 0"),
    ],
)
def test_a_size_that_cannot_fit_or_is_no_size_is_refused_by_the_key(setting, available_gib, ranks, message):
    with pytest.raises(ValueError, match=message):
        kv_cache_size(setting, {}, int(available_gib * GIB), ranks)
    if setting in ("lots", "0"):  # refused when the config is built, before any engine
        with pytest.raises(ValueError, match=message):
            VLLMConfig(cpu_kv_cache_gib=setting)
