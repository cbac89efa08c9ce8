"""Writing a model directory in its family's released layout (what vLLM and the released
checkpoints read), apart from loading one (``loading.py``): ``lora.py`` writes merged directories
through it, and so do the trainer's checkpoints and the tiny test models."""

from __future__ import annotations

import os
from pathlib import Path


def write_released_layout(directory: str | os.PathLike) -> None:
    """Rewrite, in place, the tensors of the HF model directory ``directory`` that its family's
    released checkpoints store otherwise than transformers writes them
    (``ModelFamily.transposed_in_checkpoints``: Qwen3-VL-MoE's fused experts), so that vLLM and
    other readers of the released format load it; transformers reads either layout. Every place
    that writes a model directory calls it after ``save_pretrained``. Each shard is written beside
    itself and renamed over it, so a reader never sees half of one.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    from .families import family_of_checkpoint

    family = family_of_checkpoint(str(directory))
    ends = family.engine.transposed_in_checkpoints
    if not ends:
        return
    for shard in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            metadata = f.metadata()
            if not any(k.endswith(ends) for k in f.keys()):
                continue
            tensors = dict(family.engine.checkpoint_tensors((k, f.get_tensor(k)) for k in f.keys()))
        tmp = shard.with_name(shard.name + ".tmp")
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
        os.replace(tmp, shard)
