"""Every forward calls the vision tower once for images and once for videos, real or dummy.

Why: under FSDP every rank must run the same collectives in the same order. A micro-batch without
images (or without videos, or text only) would skip a vision-tower call that another rank makes,
and the ranks' all-gathers would no longer line up (transformers#37186 and its many cousins). So
when a modality is missing we run the tower on a tiny zero input and add its output, times 0, to
the token embeddings *before* the language model: the call order, and the backward order, match
a real vision pass, every vision parameter receives a (zero) gradient, and the loss is unchanged.
The family's vision layout says which tower calls a forward makes (``family.vision.tower_calls``:
Qwen-VL one per modality, InternVL one for tiles and frames together) and how to make the smallest one.

Use it as a context manager around training forwards only (generation needs none of this)::

    with DummyVisionPass(model).expect(inputs):
        out = model(**inputs)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch


def vision_tower(model) -> torch.nn.Module:
    """The model's vision tower, where its family's vision layout says it is."""
    from .families import family_of_model

    return family_of_model(model).vision.tower(model)


class DummyVisionPass:
    """Adds zero-weighted dummy vision-tower passes for the modalities a forward lacks."""

    def __init__(self, model) -> None:
        from .families import family_of_model

        self.model = model
        self.vision = family_of_model(model).vision
        self.tower = self.vision.tower(model)
        self.missing: tuple[str, ...] = ()
        self.calls = 0  # dummy tower calls made (for tests and metrics)
        model.get_input_embeddings().register_forward_hook(self._add_dummy)

    def _add_dummy(self, module, args, output: torch.Tensor) -> torch.Tensor:
        if not self.missing:
            return output
        missing, self.missing = self.missing, ()  # once per forward (generation reuses the embedder)
        zero = output.new_zeros(())
        for _ in missing:
            zero = zero + self.vision.dummy_output(self.model)
            self.calls += 1
        return output + 0.0 * zero.to(output.dtype)

    @contextmanager
    def expect(self, inputs: dict[str, Any], enabled: bool = True):
        """Within the block, the next forward gets dummy passes for the modalities ``inputs`` lacks."""
        if enabled:
            calls = self.vision.tower_calls
            self.missing = tuple(m for m, key in calls.items() if inputs.get(key) is None)
        try:
            yield self
        finally:
            self.missing = ()
