"""The policy's weights with LoRA merged in, under the base model's Hugging Face names.

A rollout engine that holds its own copy of the policy (vLLM, or an HF copy under FSDP) knows only
the base architecture: it wants ``W + scaling * B @ A`` for every adapted weight, under the name the
un-wrapped model's ``state_dict()`` gives it. :func:`merged_state_dict` computes exactly that from the
training model *without touching it*: peft's ``merge_adapter()``/``unmerge_adapter()`` round trip
would add and subtract the delta in place, and ``(W + d) - d`` is not ``W`` in floating point, so the
fp32 master weights would drift a little at every push.

The merge follows peft's own definition (``LoraLayer.merge``/``get_delta_weight``): for each active
adapter in order, ``delta = transpose(B @ A, fan_in_fan_out) * scaling`` (embeddings: always
transposed), added to the base weight; ``lora_bias`` adds ``scaling * B.bias`` to the base bias;
``modules_to_save`` copies replace the originals. Dropout plays no part (it is an activation mask).
In fp32 the result equals ``merge_and_unload()`` bit for bit; in 16-bit dtypes the sum is formed in
fp32 and rounded once (peft on a GPU rounds the delta first), so it is at least as accurate.

Works on a plain model (its state dict, as is), a ``PeftModel`` or ``LoraModel``, and either of
them sharded with FSDP2: entries are all-gathered one at a time as they are reached (a collective:
every rank must consume the iterator to the end, in step), and one adapted module's pieces are held
until its last piece arrives, so peak extra memory is about one layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch


@dataclass
class _Adapted:
    """One module that a peft wrapper replaced, and how to rebuild its plain entries.

    Attributes:
        prefix: The wrapper's state-dict prefix in the wrapped model (without the trailing dot).
        kind: ``"linear"`` or ``"embedding"`` (LoRA layers), ``"copy"`` (``modules_to_save``).
        adapters: Active adapters to merge, in peft's merge order; empty when adapters are
            disabled (or, for a LoRA layer, already merged into the base weight).
        scaling: ``alpha / r`` (or ``alpha / sqrt(r)`` with rsLoRA) per adapter, as peft holds it.
        fan_in_fan_out: The base weight is stored transposed (GPT-2 ``Conv1D``).
        lora_bias: Per adapter: ``lora_B`` has a bias that is merged into the base bias.
        pieces: The wrapper's state-dict keys (relative to ``prefix``), filled while streaming.
    """

    prefix: str
    kind: str
    adapters: tuple[str, ...] = ()
    scaling: dict[str, float] = field(default_factory=dict)
    fan_in_fan_out: bool = False
    lora_bias: dict[str, bool] = field(default_factory=dict)
    pieces: dict[str, torch.Tensor] = field(default_factory=dict)


def merged_state_dict(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(hf_name, full tensor)`` for every entry of the base model's state dict, LoRA merged in.

    ``model`` is a plain transformers model, a peft-wrapped one, or either sharded with FSDP2. Names
    are the base model's (``base_model.model.`` and the ``base_layer.`` / ``lora_*`` parts are gone).
    Yielded tensors are detached; entries the merge does not change may share storage with the
    model's parameters, so do not modify them in place.
    """
    root = _root_prefix(model)
    adapted = _adapted_modules(model)
    state = model.state_dict()  # under FSDP2: sharded DTensors; nothing is gathered yet
    owner: dict[str, _Adapted] = {}
    last: dict[str, str] = {}
    for key in state:
        entry = _owning(key, adapted)
        if entry is not None:
            owner[key] = entry
            last[entry.prefix] = key
    for key, value in state.items():
        full = (value.full_tensor() if hasattr(value, "full_tensor") else value).detach()
        entry = owner.get(key)
        if entry is None:
            yield _base_name(key, root), full
            continue
        entry.pieces[key[len(entry.prefix) + 1 :]] = full
        if last[entry.prefix] == key:  # the wrapper's last piece: emit its plain entries
            for local, tensor in _rebuild(entry):
                yield _base_name(f"{entry.prefix}.{local}", root), tensor
            entry.pieces = {}


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The LoRA factors alone (``lora_A``/``lora_B``/embedding factors), full tensors on the CPU,
    under the model's own state-dict names: what an adapter-only sync sends. A collective under
    FSDP2, like :func:`merged_state_dict` (every rank calls it)."""
    out = {}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            full = value.full_tensor() if hasattr(value, "full_tensor") else value
            out[key] = full.detach().to("cpu", copy=True)
    return out


def has_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` contains peft adapter layers (the push must then merge)."""
    return bool(_adapted_modules(model))


def _root_prefix(model: torch.nn.Module) -> str:
    """What a peft wrapper puts in front of the base model's names."""
    try:
        from peft import PeftModel
        from peft.tuners.tuners_utils import BaseTuner
    except ImportError:  # peft is not installed: the model cannot be wrapped
        return ""
    if isinstance(model, PeftModel):
        return "base_model.model."
    if isinstance(model, BaseTuner):
        return "model."
    return ""


def _base_name(key: str, root: str) -> str:
    if not key.startswith(root):
        raise ValueError(f"state-dict entry {key!r} is outside the wrapped base model ({root!r})")
    return key[len(root) :]


def _adapted_modules(model: torch.nn.Module) -> dict[str, _Adapted]:
    """Every peft wrapper in ``model`` by state-dict prefix; unsupported kinds fail by name."""
    try:
        from peft.tuners.lora import LoraLayer
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper, ModulesToSaveWrapper
    except ImportError:
        return {}
    out: dict[str, _Adapted] = {}
    for name, module in model.named_modules():
        if isinstance(module, ModulesToSaveWrapper):
            on = not module.disable_adapters and module.active_adapters
            active = tuple(a for a in module.active_adapters if a in module.modules_to_save) if on else ()
            out[name] = _Adapted(name, "copy", adapters=active[:1])  # peft runs the first active copy
        elif isinstance(module, AuxiliaryTrainingWrapper):
            raise NotImplementedError(
                f"{name}: {type(module).__name__} (trainable tokens) cannot be merged for the rollout engine"
            )
        elif isinstance(module, LoraLayer):
            out[name] = _lora_entry(name, module)
        elif isinstance(module, BaseTunerLayer):
            raise NotImplementedError(
                f"{name}: {type(module).__name__} is not a LoRA layer; only LoRA adapters can be merged"
            )
    return out


def _lora_entry(name: str, module) -> _Adapted:
    from peft.tuners.lora import LoraLayer

    if isinstance(module.get_base_layer(), LoraLayer) or isinstance(module.base_layer, LoraLayer):
        raise NotImplementedError(f"{name}: stacked LoRA layers cannot be merged")
    if len(module.lora_A) and len(module.lora_embedding_A):
        raise NotImplementedError(f"{name}: a LoRA layer with both linear and embedding adapters")
    if len(module.lora_embedding_A):
        kind = "embedding"
    elif type(module).__name__ == "Linear" or not len(module.lora_A):
        kind = "linear"
    else:  # Conv, MultiheadAttention, ParamWrapper: not what our targets (Linear layers) produce
        raise NotImplementedError(f"{name}: LoRA on {type(module).__name__} layers cannot be merged")
    # peft's own merge order: the active adapters this layer has, skipped when disabled; a layer
    # whose adapters are merged already carries them in its base weight
    names = module.lora_embedding_A if kind == "embedding" else module.lora_A
    active = (
        ()
        if module.disable_adapters or module.merged
        else tuple(a for a in module.active_adapters if a in names)
    )
    variants = getattr(module, "lora_variant", {})
    for a in active:
        if a in variants or getattr(module, "use_dora", {}).get(a, False):
            raise NotImplementedError(
                f"{name}: adapter {a!r} is a LoRA variant ({type(variants.get(a)).__name__}, e.g. DoRA): "
                "only plain LoRA is merged for the rollout engine"
            )
    return _Adapted(
        name,
        kind,
        adapters=active,
        scaling={a: float(module.scaling[a]) for a in active},
        fan_in_fan_out=bool(getattr(module, "fan_in_fan_out", False)),
        lora_bias={a: bool(getattr(module, "lora_bias", {}).get(a, False)) for a in active},
    )


def _owning(key: str, adapted: dict[str, _Adapted]) -> _Adapted | None:
    """The wrapper a state-dict key belongs to (the longest matching prefix), if any."""
    parts = key.split(".")
    for n in range(len(parts) - 1, 0, -1):
        entry = adapted.get(".".join(parts[:n]))
        if entry is not None:
            return entry
    return None


def _rebuild(entry: _Adapted) -> Iterator[tuple[str, torch.Tensor]]:
    """A wrapper's pieces -> the plain module's entries (relative names)."""
    p = entry.pieces
    if entry.kind == "copy":
        source = f"modules_to_save.{entry.adapters[0]}." if entry.adapters else "original_module."
        for local, tensor in p.items():
            if local.startswith(source):
                yield local[len(source) :], tensor
        return
    for local, tensor in p.items():
        if not local.startswith("base_layer."):
            continue  # lora_A/B, embedding factors: folded in below
        plain = local[len("base_layer.") :]
        if plain == "weight":
            yield plain, _merged_weight(entry, tensor)
        elif plain == "bias" and any(entry.lora_bias.values()):
            out = tensor.float()
            for a in entry.adapters:
                if entry.lora_bias[a]:
                    out = out + p[f"lora_B.{a}.bias"].float() * entry.scaling[a]
            yield plain, out.to(tensor.dtype)
        else:
            yield plain, tensor


def _merged_weight(entry: _Adapted, weight: torch.Tensor) -> torch.Tensor:
    if not entry.adapters:
        return weight
    p = entry.pieces
    out = weight if weight.dtype == torch.float32 else weight.float()
    for a in entry.adapters:
        if entry.kind == "embedding":
            A, B, transposed = p[f"lora_embedding_A.{a}"], p[f"lora_embedding_B.{a}"], True
        else:
            A, B, transposed = p[f"lora_A.{a}.weight"], p[f"lora_B.{a}.weight"], entry.fan_in_fan_out
        # peft's expression and operation order, so fp32 results equal merge_and_unload()'s bits
        delta = B.float() @ A.float()
        out = out + (delta.T if transposed else delta) * entry.scaling[a]
    return out.to(weight.dtype)


__all__ = ["adapter_state", "has_lora", "merged_state_dict"]
