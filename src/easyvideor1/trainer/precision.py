"""The trainer's precision: fp32 master weights, compute in the compute dtype, and a start-up
refusal of master weights too coarse for the learning rate.

Peers train the same way: master weights and AdamW moments in fp32, forwards and backwards in
bf16, gradients reduced in fp32. bf16 keeps 8 significant bits: a weight of 0.02 has a spacing of
~1.2e-4, while one AdamW step moves a weight by at most about ``lr`` (1e-6 in the video recipes),
so a bf16 master rounds almost every update away, and loss, grad norm and log-prob gap all still
look normal. ``model.dtype`` is the masters' dtype; ``distributed.param_dtype`` the compute dtype
(FSDP2's ``MixedPrecisionPolicy`` under torchrun, ``torch.autocast`` in one process).
"""

from __future__ import annotations

import functools

import torch

from ..errors import ConfigError
from ..models.loading import DTYPES

# explicit mantissa bits of the low-precision floats (spacing of |w| in [2^e, 2^(e+1)) is 2^(e-bits))
_MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10}
# a refusal needs most weights frozen: a few tiny or zero weights always move
_FROZEN_SHARE_REFUSED = 0.5
_SAMPLE_PER_TENSOR = 4096


def compute_dtype(cfg) -> torch.dtype:
    """The dtype forwards and backwards run in: ``distributed.param_dtype``, else the masters'."""
    return DTYPES[cfg.distributed.param_dtype or cfg.model.dtype]


def frozen_share(params: list[torch.Tensor], lr: float) -> float:
    """The share of the trainable weights (a strided sample of each tensor) that one optimizer
    step of size ``lr`` cannot change: round-to-nearest keeps ``w`` when the step is at most half
    the spacing of floats around ``w``. 0 for fp32 masters."""
    frozen = total = 0
    for p in params:
        bits = _MANTISSA_BITS.get(p.dtype)
        if bits is None:
            continue
        flat = p.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // _SAMPLE_PER_TENSOR)].float().abs()
        nonzero = sample[sample > 0]
        spacing = torch.exp2(torch.floor(torch.log2(nonzero)) - bits)
        frozen += int((lr <= spacing / 2).sum())
        total += sample.numel()
    return frozen / total if total else 0.0


def check_master_precision(model: torch.nn.Module, cfg) -> None:
    """Refuse, at start-up, trainable bf16/fp16 master weights most of which the configured
    learning rates cannot move (``model.allow_low_precision_masters`` lets it run anyway)."""
    if cfg.model.allow_low_precision_masters:
        return
    params = [p for p in model.parameters() if p.requires_grad]
    tc = cfg.trainer
    rates = [("trainer.lr", tc.lr)] + ([("trainer.sft_lr", tc.sft_lr)] if tc.sft_warmup_steps else [])
    for key, lr in rates:
        share = frozen_share(params, lr)
        if share > _FROZEN_SHARE_REFUSED:
            raise ConfigError(
                f"model.dtype={cfg.model.dtype} master weights with {key}={lr:g}: one optimizer step "
                f"cannot change {100 * share:.0f}% of the trainable weights (below half their "
                f"{cfg.model.dtype} spacing), so training would silently do almost nothing; set "
                "model.dtype=float32 and compute in bfloat16 with distributed.param_dtype=bfloat16 "
                "(or model.allow_low_precision_masters=true to run anyway)"
            )


def autocast_forward(model: torch.nn.Module, dtype: torch.dtype, device: torch.device) -> None:
    """One process without FSDP: run ``model``'s forwards (training, log-probs, HF generation)
    under ``torch.autocast`` in ``dtype``, so fp32 masters compute as FSDP2's mixed precision
    would; a no-op when ``dtype`` is the parameters' own."""
    if dtype == next(model.parameters()).dtype:
        return
    forward = model.forward

    @functools.wraps(forward)
    def cast(*args, **kwargs):
        with torch.autocast(device.type, dtype=dtype):
            return forward(*args, **kwargs)

    model.forward = cast


def changed_share(
    before: dict[str, torch.Tensor],
    after: dict[str, torch.Tensor],
    second_moments: dict[str, torch.Tensor] | None = None,
) -> dict[str, float]:
    """How much of a model one optimizer step moved, each weight compared in its own dtype.

    ``params_changed_fraction``: the share of the weights that changed, counting only those the
    step had a gradient for when ``second_moments`` (AdamW's ``exp_avg_sq`` by name) is given (an
    embedding row of a token no sequence held gets none, in any precision); ``norm_gains_changed``
    and ``norm_gains``: the elements of the normalisation weights (gains near 1.0, the first to
    stop moving in bf16) that changed, and all of them.
    """
    changed = counted = gains_changed = gains = 0
    for name, old in before.items():
        moved = after[name].ne(old)
        if second_moments is not None and name in second_moments:
            had_gradient = second_moments[name] > 0
            changed += int((moved & had_gradient).sum())
            counted += int(had_gradient.sum())
        else:
            changed += int(moved.sum())
            counted += moved.numel()
        if "norm" in name and name.endswith("weight"):
            gains_changed += int(moved.sum())
            gains += moved.numel()
    return {
        "params_changed_fraction": changed / max(counted, 1),
        "norm_gains_changed": float(gains_changed),
        "norm_gains": float(gains),
    }
