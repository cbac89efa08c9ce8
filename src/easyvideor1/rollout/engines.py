"""The engine a job that serves a checkpoint generates with (``eval``, ``filter``), from the config.

Training builds its engine around the policy it trains (``trainer/rollout_engines.py``); the jobs
here load a checkpoint instead: HF ``generate`` (batching the requests that have gathered) or vLLM
``AsyncLLM`` (one request per sample), both configured by the ``rollout.vllm`` section.
"""

from __future__ import annotations

from .config import ENGINES, VLLMConfig


def load_engine(model: str, engine: str, dtype: str, vllm: VLLMConfig | None = None, max_batch: int = 4):
    """``(engine, processor)`` for checkpoint ``model``: ``engine`` ``hf`` (``max_batch`` requests per
    ``generate``) or ``vllm`` (``rollout.vllm`` settings)."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == "hf":
        import torch

        from ..models.loading import load_policy
        from .hf import HFRolloutEngine

        # transformers' default attention (sdpa) on purpose: these jobs serve a checkpoint and have no
        # model section; generation pads nothing that flash-attention would save here
        policy, processor = load_policy(model, dtype=dtype)
        policy.to("cuda" if torch.cuda.is_available() else "cpu").eval()
        return HFRolloutEngine(policy, processor, max_batch=max_batch), processor
    from transformers import AutoProcessor

    from .vllm_async import AsyncVLLMEngine

    processor = AutoProcessor.from_pretrained(model)
    return AsyncVLLMEngine(model, processor, vllm, dtype=dtype), processor
