"""The rollout engine around an update: sleep, free the cache, wake in two parts, push, in one
context object, in the order a colocated engine needs on a GPU (``EngineHandoff``)."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.trainer import handoff as handoff_module
from easyvideor1.trainer.handoff import EngineHandoff, staged_copy


class RecordingEngine:
    """A RolloutEngine stand-in that records what the handoff asks of it, in one list shared with
    the allocator's cache releases (``free_cached_memory``)."""

    eos_ids, pad_id, banned = [0], 0, []
    weight_dtype = None

    def __init__(self, owns_weights: bool, calls: list[str], adapter_sync: bool = False):
        self.owns_weights, self.adapter_sync, self.calls = owns_weights, adapter_sync, calls
        self.weights: dict[str, torch.Tensor] = {}

    def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep(level={level})")

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(f"wake_up({','.join(tags or ['all'])})")

    def update_weights(self, named_tensors) -> None:
        self.weights = {k: v.clone() for k, v in named_tensors}
        self.calls.append("update_weights")

    def update_adapter(self, adapter_dir: str) -> None:
        self.calls.append("update_adapter")


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """The call log; freeing the allocator's cache is recorded in it (on a GPU it empties the
    CUDA cache, on a CPU it does nothing)."""
    log: list[str] = []
    monkeypatch.setattr(handoff_module, "free_cached_memory", lambda: log.append("empty_cache"))
    return log


AFTER_UPDATE = ["empty_cache", "wake_up(weights)", "update_weights", "empty_cache", "wake_up(kv_cache)"]


def test_generate_sleep_update_then_free_wake_weights_push_free_wake_kv(calls) -> None:
    model, engine = torch.nn.Linear(2, 2), RecordingEngine(True, calls)
    handoff = EngineHandoff(engine, model, sleep=True)
    handoff.release()  # the step's generation is over
    calls.append("logprobs")
    with handoff:
        calls.append("update")
        with torch.no_grad():
            model.weight.add_(1.0)
    assert calls == ["sleep(level=2)", "logprobs", "update", *AFTER_UPDATE]
    assert torch.equal(engine.weights["weight"], model.weight.detach())
    assert handoff.asleep == 0 and handoff.version == handoff.pushed == 1
    assert {
        "after_generation",
        "after_sleep",
        "update_peak",
        "after_wake_weights",
        "after_wake_kv_cache",
    } <= set(handoff.memory)


def test_an_engine_without_sleep_gets_the_same_order_without_the_sleep_calls(calls) -> None:
    engine = RecordingEngine(True, calls)
    with EngineHandoff(engine, torch.nn.Linear(2, 2)):
        calls.append("update")
    assert calls == ["update", "empty_cache", "update_weights", "empty_cache"]


def test_adapter_only_sync_sleeps_at_level_1_so_the_base_weights_survive(calls, monkeypatch) -> None:
    from peft import LoraConfig, get_peft_model

    from easyvideor1.models import lora

    # the adapter's files are lora.py's concern (tested there); here only the engine's calls count
    monkeypatch.setattr(lora, "save_adapter", lambda model, directory, tensors: None)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

    model = get_peft_model(Tiny(), LoraConfig(r=2, target_modules=["proj"]))
    engine = RecordingEngine(True, calls, adapter_sync=True)
    handoff = EngineHandoff(engine, model, sleep=True)
    handoff.release()
    with handoff:
        calls.append("update")
    assert calls == [
        "sleep(level=1)",
        "update",
        "empty_cache",
        "wake_up(weights)",
        "update_adapter",
        "empty_cache",
        "wake_up(kv_cache)",
    ]
    handoff.close()


def test_an_engine_over_the_training_model_gets_no_push(calls) -> None:
    engine = RecordingEngine(False, calls)
    with EngineHandoff(engine, torch.nn.Linear(2, 2)):
        pass
    assert calls == ["empty_cache", "empty_cache"]


def test_a_failed_update_leaves_the_engine_asleep_until_something_generates(calls) -> None:
    engine = RecordingEngine(True, calls)
    handoff = EngineHandoff(engine, torch.nn.Linear(2, 2), sleep=True)
    with pytest.raises(RuntimeError, match="boom"), handoff:
        raise RuntimeError("boom")
    assert calls == ["sleep(level=2)"]
    handoff.ensure_awake()  # level 2 discarded the engine's weights: they are pushed again
    assert calls == ["sleep(level=2)", *AFTER_UPDATE]
    handoff.ensure_awake()
    assert calls == ["sleep(level=2)", *AFTER_UPDATE]  # awake: nothing more


def test_a_deferred_push_stages_a_host_copy_in_the_engine_dtype_and_never_sleeps(calls) -> None:
    model, engine = torch.nn.Linear(2, 2), RecordingEngine(True, calls)
    engine.weight_dtype = torch.bfloat16
    handoff = EngineHandoff(engine, model, deferred=True)
    with handoff:
        calls.append("update")
    assert calls == ["update", "empty_cache", "empty_cache"]  # staged, not loaded
    assert handoff.apply_pending() == 1
    assert calls[-1] == "update_weights"
    assert engine.weights["weight"].dtype == torch.bfloat16
    assert torch.equal(engine.weights["weight"], model.weight.detach().to(torch.bfloat16))
    with pytest.raises(ValueError, match="cannot sleep"):
        EngineHandoff(engine, model, sleep=True, deferred=True)


def test_staged_copies_do_not_share_storage_with_the_model() -> None:
    model = torch.nn.Linear(2, 2)
    staged = staged_copy(model.state_dict().items())
    with torch.no_grad():
        model.weight.add_(1.0)
    assert not torch.equal(staged["weight"], model.weight)
    assert staged["weight"].dtype == torch.float32


def test_the_hf_engine_copies_pushed_weights_into_its_own_model() -> None:
    from easyvideor1.rollout.hf import HFRolloutEngine

    class Processor:
        class tokenizer:  # noqa: N801 - the attribute name transformers uses
            pad_token_id, eos_token_id, unk_token_id = 0, 0, None

            @staticmethod
            def convert_tokens_to_ids(token):
                return None

    class Model(torch.nn.Linear):
        class generation_config:  # noqa: N801
            eos_token_id = 0

    trainer_model, copy = Model(2, 2), Model(2, 2)
    engine = HFRolloutEngine(copy, Processor(), owns_weights=True)
    EngineHandoff(engine, trainer_model).push()
    assert torch.equal(copy.weight, trainer_model.weight)
    shared = HFRolloutEngine(trainer_model, Processor())
    assert not shared.owns_weights
    with pytest.raises(RuntimeError, match="training model itself"):
        shared.update_weights(trainer_model.state_dict().items())
