"""The ``hf`` engine kind: transformers ``generate``.

Training: the policy itself (one process), a separate copy receiving pushed weights (under FSDP),
or, with ``rollout.placement=separate``, a copy in a child process on a device of its own. Serving:
the checkpoint loaded with transformers' default attention, batching the requests that have
gathered (``max_batch`` per ``generate``).
"""

from __future__ import annotations

from ...errors import ConfigError
from ..engines import ServingEngineRequest, TrainingEngineRequest, register_engine


def train(request: TrainingEngineRequest):
    from ..hf import HFRolloutEngine

    if request.cfg.rollout.placement == "separate":
        return _separate(request)
    return HFRolloutEngine(request.model, request.processor, owns_weights=request.owns_weights)


def _separate(request: TrainingEngineRequest):
    """``rollout.placement=separate``: the engine in a child process, on a GPU of its own or, on
    CPUs, with half of this process's threads (the trainer keeps the rest)."""
    import torch

    from ..remote import RemoteHFEngine

    cfg = request.cfg
    device = "cpu"
    if request.device is not None and request.device.type == "cuda":
        gpus = torch.cuda.device_count()
        if gpus <= request.world:
            raise ConfigError(
                f"rollout.placement=separate needs a GPU for the engine: {gpus} visible, all used by "
                f"the trainer's {request.world} rank(s) (use rollout.placement=colocated)"
            )
        device = f"cuda:{gpus - 1}"
    threads = torch.get_num_threads()
    engine_threads = max(1, threads // 2)
    if device == "cpu":
        torch.set_num_threads(max(1, threads - engine_threads))
    return RemoteHFEngine(
        cfg.model.path,
        request.processor,
        request.model,
        dtype=cfg.model.dtype,
        attn_implementation=cfg.model.attn_implementation,
        device=device,
        threads=engine_threads,
        seed=request.seed,
    )


def serve(request: ServingEngineRequest):
    import torch

    from ...models.loading import load_policy
    from ..hf import HFRolloutEngine

    # transformers' default attention (sdpa) on purpose: these jobs serve a checkpoint and have no
    # model section; generation pads nothing that flash-attention would save here
    policy, processor = load_policy(request.model, dtype=request.dtype)
    policy.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    return HFRolloutEngine(policy, processor, max_batch=request.max_batch), processor


register_engine("hf", train=train, serve=serve)
