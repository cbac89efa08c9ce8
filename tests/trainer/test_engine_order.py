"""The engine's memory order through the real trainer, every step: generate -> sleep -> log-probs
and update -> free the cache -> wake the weights -> push -> free the cache -> wake the KV cache.

A recording engine (the HF engine on its own copy of the policy, standing in for a colocated vLLM
engine with sleep mode) logs every call the trainer makes of it, in one list with the allocator's
cache releases; on a GPU the same calls reach vLLM's sleep mode and ``torch.cuda.empty_cache``.
"""

from __future__ import annotations

import copy
import threading

import pytest

from easyvideor1.rollout.hf import HFRolloutEngine
from easyvideor1.trainer import build, handoff
from easyvideor1.trainer.loop import Trainer

AFTER_UPDATE = ["empty_cache", "wake_up(weights)", "update_weights", "empty_cache", "wake_up(kv_cache)"]


class RecordingEngine:
    """An engine with its own weights that records sleep / wake / push / generate calls (and the
    thread each came from), delegating the work to an HF engine over a copy of the policy."""

    def __init__(self, model, processor, calls: list[tuple[str, str]], adapter_sync: bool = False):
        self.inner = HFRolloutEngine(copy.deepcopy(model), processor, owns_weights=True)
        self.calls, self.adapter_sync = calls, adapter_sync

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _log(self, what: str) -> None:
        self.calls.append((what, threading.current_thread().name))

    def sleep(self, level: int = 1) -> None:
        self._log(f"sleep(level={level})")

    def wake_up(self, tags: list[str] | None = None) -> None:
        self._log(f"wake_up({','.join(tags or ['all'])})")

    def update_weights(self, named_tensors) -> None:
        self._log("update_weights")
        self.inner.update_weights(named_tensors)

    def update_adapter(self, adapter_dir: str) -> None:  # vLLM's LoRA: only the adapter travels
        self._log("update_adapter")

    def generate(self, *args, **kwargs):
        self._log("generate")
        return self.inner.generate(*args, **kwargs)

    def submit(self, request):
        self._log("generate")
        return self.inner.submit(request)


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    def make(cfg, processor, model, state, owns_weights=False):
        adapter = cfg.model.lora.enabled and cfg.rollout.vllm.lora_sync == "adapter"
        return RecordingEngine(model, processor, calls, adapter_sync=adapter)

    monkeypatch.setattr(build, "make_rollout_engine", make)
    monkeypatch.setattr(
        handoff,
        "free_cached_memory",
        lambda: calls.append(("empty_cache", threading.current_thread().name)),
    )
    return calls


def _squeezed(calls: list[tuple[str, str]]) -> list[str]:
    """The calls with each run of generate calls (a batch's, a validation's requests) as one."""
    out: list[str] = []
    for what, _ in calls:
        if not (what == "generate" and out and out[-1] == "generate"):
            out.append(what)
    return out


def test_sync_steps_sleep_through_logprobs_and_update_then_wake_in_two_parts(make_cfg, recorded):
    trainer = Trainer(
        make_cfg("rollout.engine=vllm", "rollout.vllm.sleep_between_phases=true", "trainer.val_size=2")
    )
    logprobs_seen = []
    real = trainer.parts.handoff.mark

    def mark(phase):  # the log-probs run while the engine sleeps
        if phase == "after_logprobs":
            logprobs_seen.append(trainer.parts.handoff.asleep)
            recorded.append(("logprobs", threading.current_thread().name))
        real(phase)

    trainer.parts.handoff.mark = mark
    trainer.train()
    step = ["generate", "sleep(level=2)", "logprobs", *AFTER_UPDATE]
    # validation before the first step (its generation runs into the first step's), two steps,
    # validation at the end on the awake engine
    assert _squeezed(recorded) == [*step, *step, "generate"]
    assert logprobs_seen == [2, 2]
    assert trainer.engine_version == 2
    trainer.close()


def test_adapter_only_sync_sleeps_at_level_1_and_sends_the_adapter_between_the_wake_ups(make_cfg, recorded):
    trainer = Trainer(
        make_cfg(
            "rollout.engine=vllm",
            "rollout.vllm.sleep_between_phases=true",
            "rollout.vllm.lora_sync=adapter",
            "model.lora.rank=4",
            "trainer.val_size=0",
        )
    )
    trainer.train()
    step = ["generate", "sleep(level=1)", *AFTER_UPDATE]
    step[step.index("update_weights")] = "update_adapter"  # the base weights stayed in host memory
    assert _squeezed(recorded) == [*step, *step]
    trainer.close()


def test_one_step_off_never_sleeps_and_loads_each_push_on_the_rollout_thread(make_cfg, recorded):
    trainer = Trainer(
        make_cfg(
            "rollout.engine=vllm", "rollout.mode=one_step_off", "trainer.val_size=0", "trainer.max_steps=3"
        )
    )
    trainer.train()
    names = [what for what, _ in recorded]
    assert not any(n.startswith(("sleep", "wake_up")) for n in names)
    # every update frees the cache before and after staging its host copy; the copy is loaded by
    # the rollout thread before the batch it generates next
    assert names.count("empty_cache") == 2 * 3
    pushes = [thread for what, thread in recorded if what == "update_weights"]
    assert pushes and all(thread != threading.main_thread().name for thread in pushes)
    loads = [i for i, (what, _) in enumerate(recorded) if what == "update_weights"]
    # each staged copy is loaded after its update; all but the last before a batch is generated
    assert all("generate" in names[i:j] for i, j in zip(loads, loads[1:], strict=False))
    trainer.close()
