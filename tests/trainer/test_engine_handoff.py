"""The rollout engine around an update: sleep, wake up, weight push, in one context object."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.trainer.rollout_engines import EngineHandoff


class RecordingEngine:
    """A RolloutEngine stand-in that records what the handoff asks of it."""

    eos_ids, pad_id, banned = [0], 0, []
    adapter_sync = False  # declared, as every engine declares it

    def __init__(self, owns_weights: bool):
        self.owns_weights = owns_weights
        self.calls: list[str] = []
        self.weights: dict[str, torch.Tensor] = {}

    def sleep(self) -> None:
        self.calls.append("sleep")

    def wake_up(self) -> None:
        self.calls.append("wake_up")

    def update_weights(self, named_tensors) -> None:
        self.weights = {k: v.clone() for k, v in named_tensors}
        self.calls.append("update_weights")


def test_sleep_update_wake_then_push_the_new_weights() -> None:
    model, engine = torch.nn.Linear(2, 2), RecordingEngine(owns_weights=True)
    with EngineHandoff(engine, model, sleep=True):
        engine.calls.append("update")
        with torch.no_grad():
            model.weight.add_(1.0)
    assert engine.calls == ["sleep", "update", "wake_up", "update_weights"]
    assert torch.equal(engine.weights["weight"], model.weight.detach())


def test_an_engine_over_the_training_model_gets_no_push() -> None:
    engine = RecordingEngine(owns_weights=False)
    with EngineHandoff(engine, torch.nn.Linear(2, 2)):
        pass
    assert engine.calls == []


def test_a_failed_update_leaves_the_engine_alone() -> None:
    engine = RecordingEngine(owns_weights=True)
    with pytest.raises(RuntimeError, match="boom"), EngineHandoff(engine, torch.nn.Linear(2, 2), sleep=True):
        raise RuntimeError("boom")
    assert engine.calls == ["sleep"]


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
