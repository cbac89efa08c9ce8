"""The ``vllm`` engine kind, configured by the ``rollout.vllm`` section.

Training: one colocated ``LLM`` per rank that receives the trainer's weights after each update
(the merged weights, or with ``rollout.vllm.lora_sync: adapter`` only the LoRA adapter). Serving:
``AsyncLLM``, one request per sample.
"""

from __future__ import annotations

import logging

from ...errors import ConfigError
from ..engines import ServingEngineRequest, TrainingEngineRequest, register_engine

log = logging.getLogger(__name__)


def train(request: TrainingEngineRequest):
    from ...models.families import family_of_model
    from ..vllm import VLLMRolloutEngine

    cfg, model = request.cfg, request.model
    family = family_of_model(model)
    if family.engine.vllm_weight_push:  # the engine would keep sampling from the first weights
        raise ConfigError(
            f"rollout.engine=vllm cannot train {family.model_type}: {family.engine.vllm_weight_push}; "
            "use rollout.engine=hf (vLLM still serves it for evaluation)"
        )
    v = cfg.rollout.vllm
    adapter = v.lora_sync == "adapter" and adapter_sync_applies(model)
    return VLLMRolloutEngine.from_config(
        cfg.model.path,
        request.processor,
        v,
        seed=request.seed,
        colocated=True,
        max_lora_rank=cfg.model.lora.rank if adapter else 0,
    )


def adapter_sync_applies(model) -> bool:
    """Whether ``rollout.vllm.lora_sync: adapter`` applies: a LoRA policy whose adapters are all
    in the language model (vLLM's LoRA does not cover the vision tower here)."""
    from ...models.lora_merge import has_lora

    if not has_lora(model):
        log.info("rollout.vllm.lora_sync=adapter without model.lora: full weights are pushed")
        return False
    from peft.tuners.lora import LoraLayer

    from ...models.families import family_of_model

    vision = family_of_model(model).vision.modules(model)  # the tower (InternVL: and its projector)
    inside = [m for v in vision for m in v.modules() if isinstance(m, LoraLayer)]
    if inside:
        raise ConfigError(
            "rollout.vllm.lora_sync=adapter: the adapter reaches the vision tower, which vLLM's LoRA "
            "does not serve here; use rollout.vllm.lora_sync=merged or language-model targets only"
        )
    return True


def serve(request: ServingEngineRequest):
    from transformers import AutoProcessor

    from ..vllm_async import AsyncVLLMEngine

    processor = AutoProcessor.from_pretrained(request.model)
    return AsyncVLLMEngine(request.model, processor, request.vllm, dtype=request.dtype), processor


register_engine("vllm", train=train, serve=serve)
