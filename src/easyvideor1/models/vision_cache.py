"""Vision features computed once per step and reused (``model.freeze_vision_tower: true``).

Why: with a frozen tower a sample's vision features do not change within a step, yet the old
log-probs, the reference log-probs and every actor forward of every PPO epoch encode them again,
and a micro-batch holding ``n`` responses to one prompt encodes its video ``n`` times.

How: the Qwen-VL models obtain features through ``model.model.get_{image,video}_features``; this
cache shadows those two methods on each attached model (instance attributes, nothing global).
Inside :meth:`VisionFeatureCache.serving` the first forward of a step encodes every media item of
the step's prompts, one tower call per modality, from its input-embedding hook (so the call runs
inside the model's forward, where FSDP has gathered the tower), and every forward of the step then
gets its items' features by prompt index, with no tower call. The result equals recomputation: the
tower encodes each item independently (per-item attention), and the features go through the same
code in the model's forward as freshly computed ones. A sequence's own media (an episode's tool
turns' clips and images, after its prompt's) are encoded in the same call and served with it.

Under FSDP every rank makes the same tower calls: exactly one per modality per step (a zero
dummy input when a rank has no item of that modality), and none in later forwards; the frozen
tower needs no dummy pass for gradients, so ``DummyVisionPass`` is off while the cache serves.
Forwards outside ``serving`` (generation, validation, SFT warm-up) are untouched.

Staleness: features are kept from a step's first forward to :meth:`VisionFeatureCache.stop`,
keyed by the step, not by the weights. That is exact because the tower cannot change in between:
:meth:`VisionFeatureCache.start` refuses a tower with a trainable parameter, and weights that
change between steps meet a cache that :meth:`~VisionFeatureCache.stop` emptied.

A family whose processor gives one grid-less pixel tensor (InternVL: tiles and frames together,
``PromptBatch.pixel_rows``) has one feature method, ``get_image_features``, whose items are rows
(one tile or frame each, encoded independently too): a prompt's features are its rows'.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any

import torch

from .families import VISION_INPUTS
from .inputs import PromptBatch
from .tower_inputs import smallest_vision_input
from .vision import vision_tower

_METHODS = {"image": "get_image_features", "video": "get_video_features"}


class VisionFeatureCache:
    """Per-step cache of vision-encoder outputs, shared by the models it is attached to.

    ``models`` (policy, reference; ``None`` entries are skipped) must have frozen, equal vision
    towers: the features one computes stand for all of them.
    """

    def __init__(self, models) -> None:
        self.batch: PromptBatch | None = None
        self.features: dict[str, Any] = {}  # kind -> encoder output over all the step's items
        self.inputs: dict[str, tuple[Any, Any]] = {}  # kind -> (pixels, grids) of all the step's items
        self.prompt_items: dict[str, list[list[int]]] = {}  # kind -> each prompt's item indices
        self.own_items: dict[str, list[list[int]]] = {}  # kind -> each sequence's own item indices
        self.prompts: list[int] | None = None  # prompts of the forward in flight
        self.sequences: list[int] | None = None  # and its sequences (for their own media)
        self.encodes = 0  # real (non-dummy) encoder calls made (tests, metrics)
        self.served = 0  # feature requests answered from the cache
        self._encoding = False
        self._encoded = False  # this step's items are encoded
        self._originals: dict[int, dict[str, Any]] = {}
        self._towers: dict[int, torch.nn.Module] = {}
        self._families: dict[int, Any] = {}
        self._rows_key: str | None = None  # the grid-less pixel key of this step's batch (InternVL)
        for model in models:
            if model is not None:
                self._attach(model)

    # ------------------------------------------------------------------------------ the step
    def start(self, batch: PromptBatch, own_media: list[dict[str, Any] | None] | None = None) -> None:
        """A new step: forget the previous step's features; ``batch`` holds this step's prompts'
        media, ``own_media[s]`` sequence ``s``'s own (an episode's tool turns; ``None``: none)."""
        self._check_frozen()
        self.batch, self.features, self.prompts, self.sequences = batch, {}, None, None
        self.inputs, self.prompt_items, self.own_items, self._encoded = {}, {}, {}, False
        self._rows_key = None
        if batch.pixel_rows is not None:
            self._start_rows(batch, own_media)
            return
        for kind, counts in (("video", batch.video_counts), ("image", batch.image_counts)):
            pix_key, grid_key, _ = VISION_INPUTS[kind]
            pixels, grids = [batch.inputs.get(pix_key)], [batch.inputs.get(grid_key)]
            items, total = [], 0
            for c in counts:
                items.append(list(range(total, total + c)))
                total += c
            own = []
            for media in own_media or []:
                grid = (media or {}).get(grid_key)
                n = 0 if grid is None else int(grid.shape[0])
                own.append(list(range(total, total + n)))
                if n:
                    pixels.append(torch.as_tensor(media[pix_key]))
                    grids.append(torch.as_tensor(grid))
                total += n
            self.prompt_items[kind], self.own_items[kind] = items, own
            kept = [(p, g) for p, g in zip(pixels, grids, strict=True) if g is not None]
            if kept:
                self.inputs[kind] = (torch.cat([p for p, _ in kept]), torch.cat([g for _, g in kept]))

    def _check_frozen(self) -> None:
        """Features are keyed by the step alone, never by the weights: that is right only while
        nothing can change the tower within the step, so a tower with a trainable parameter is
        refused (its features would go stale at the step's first optimizer step)."""
        for family, model in self._families.values():
            for module in family.vision.modules(model):
                trainable = next((n for n, p in module.named_parameters() if p.requires_grad), None)
                if trainable is not None:
                    raise RuntimeError(
                        f"vision cache over a trainable tower ({trainable} requires grad): its features "
                        "would go stale within the step; the cache is for model.freeze_vision_tower=true"
                    )

    def _start_rows(self, batch: PromptBatch, own_media) -> None:
        """:meth:`start` for a grid-less layout: every row (tile or frame) is an item."""
        ((key, rows),) = batch.pixel_rows.items()  # one pixel tensor: tiles and frames together
        self._rows_key = key
        pixels, items, own, total = [batch.inputs.get(key)], [], [], 0
        for c in rows:
            items.append(list(range(total, total + c)))
            total += c
        for media in own_media or []:
            add = (media or {}).get(key)
            n = 0 if add is None else int(add.shape[0])
            own.append(list(range(total, total + n)))
            if n:
                pixels.append(torch.as_tensor(add))
            total += n
        self.prompt_items["image"], self.own_items["image"] = items, own
        kept = [p for p in pixels if p is not None]
        if kept:
            self.inputs["image"] = (torch.cat(kept), None)

    def stop(self) -> None:
        """End of the step: drop the features (the next step's weights or media differ)."""
        self.batch, self.features, self.prompts, self.sequences, self.inputs = None, {}, None, None, {}
        self._encoded = False

    @property
    def active(self) -> bool:
        return self.batch is not None

    @contextmanager
    def serving(self, prompt_ids: list[int], sequence_ids: list[int] | list[list[int]] | None = None):
        """The next forward is of sequences answering ``prompt_ids`` (indices into the batch); with
        ``sequence_ids`` (indices into ``start``'s ``own_media``; a list of them for a prompt read
        once by several sequences) each prompt is followed by that media."""
        if self.batch is None:
            raise RuntimeError("VisionFeatureCache.serving outside a step: call start(batch) first")
        self.prompts = list(prompt_ids)
        self.sequences = None if sequence_ids is None else list(sequence_ids)
        try:
            yield self
        finally:
            self.prompts, self.sequences = None, None

    # ------------------------------------------------------------------------------ the model
    def _attach(self, model) -> None:
        from .families import family_of_model

        inner = getattr(model, "model", model)
        family = family_of_model(model)
        # the feature methods the family's forward calls: one per tower call
        methods = {kind: _METHODS[kind] for kind in family.vision.tower_calls}
        originals = {kind: getattr(inner, name) for kind, name in methods.items()}
        self._originals[id(inner)] = originals
        self._towers[id(inner)] = vision_tower(model)
        self._families[id(inner)] = (family, model)
        for kind, name in methods.items():
            setattr(inner, name, self._server(kind, originals[kind]))
        model.get_input_embeddings().register_forward_hook(
            lambda module, args, output, inner=inner: self._encode_step(inner, output)
        )

    def _encode_step(self, inner, embeds: torch.Tensor) -> None:
        """First forward of the step: encode every item, one encoder call per modality."""
        if self.prompts is None or self._encoded or self.batch is None:
            return
        originals = self._originals[id(inner)]
        tower = self._towers[id(inner)]
        self._encoding = True
        try:
            with torch.no_grad():
                if self._rows_key is not None:
                    self._encode_rows(inner, originals["image"], embeds.device)
                for kind in ("video", "image") if self._rows_key is None else ():
                    pixels, grid = self.inputs.get(kind, (None, None))
                    if grid is None or pixels is None:
                        pixels, grid = smallest_vision_input(tower)
                        originals[kind](pixels.to(embeds.device), grid.to(embeds.device), return_dict=True)
                        continue
                    out = originals[kind](pixels.to(embeds.device), grid.to(embeds.device), return_dict=True)
                    self.features[kind] = out
                    self.encodes += 1
        finally:
            self._encoding = False
        self._encoded = True

    def _encode_rows(self, inner, original, device) -> None:
        """The step's one tower call for a grid-less layout (a zero tile when there are no rows)."""
        pixels, _ = self.inputs.get("image", (None, None))
        if pixels is None:
            family, model = self._families[id(inner)]
            family.vision.dummy_output(model)  # the same call every rank makes
            return
        self.features["image"] = original(pixel_values=pixels.to(device), return_dict=True)
        self.encodes += 1

    def _server(self, kind: str, original):
        pix_key, grid_key, _ = VISION_INPUTS[kind]

        # the original's signature is kept (functools.wraps): generate() reads it to pick its inputs
        @functools.wraps(original)
        def get_features(*args, **kwargs):
            if self._encoding or self.prompts is None or kind not in self.features:
                return original(*args, **kwargs)
            if self._rows_key is not None:
                pixels = args[0] if args else kwargs.get("pixel_values")
                return self._serve_rows(pixels, kwargs.get("return_dict", True))
            grid = args[1] if len(args) > 1 else kwargs.get(grid_key)
            return self._serve(kind, grid, kwargs.get("return_dict", True))

        return get_features

    def _serve(self, kind: str, grid_thw, return_dict: bool):
        out = self.features[kind]
        items = self._items(kind)
        grids = self.inputs[kind][1]
        expected = grids[items] if items else grids[:0]
        if grid_thw is None or not torch.equal(expected, grid_thw.detach().cpu().to(expected.dtype)):
            raise RuntimeError(
                f"vision cache: the forward's {kind} grids differ from its prompts' "
                f"{self.prompts} in the step's batch (inputs not built from this step's batch?)"
            )
        served = type(out)()
        served.pooler_output = tuple(out.pooler_output[i] for i in items)
        deepstack = getattr(out, "deepstack_features", None)
        if deepstack:
            served.deepstack_features = [tuple(layer[i] for i in items) for layer in deepstack]
        self.served += 1
        return served if return_dict else served.to_tuple()

    def _serve_rows(self, pixels, return_dict: bool):
        """A grid-less forward's features: its prompts' rows (and its sequences' own), in order.
        The forward's pixel tensor must have exactly that many rows of the step's shape (a shape
        check, as the grids check on Qwen-VL: comparing pixels would copy them every forward)."""
        out = self.features["image"]
        items = self._items("image")
        expected = (len(items), *self.inputs["image"][0].shape[1:])
        if pixels is None or tuple(pixels.shape) != expected:
            raise RuntimeError(
                f"vision cache: the forward's {self._rows_key} differ from its prompts' "
                f"{self.prompts} in the step's batch (inputs not built from this step's batch?)"
            )
        served = type(out)()
        served.pooler_output = out.pooler_output[items]
        self.served += 1
        return served if return_dict else served.to_tuple()

    def _items(self, kind: str) -> list[int]:
        """The step's items of ``kind`` this forward serves: each prompt's, then its sequence's own
        (or its sequences', one after another: a shared-prefix row)."""
        prompts = self.prompts or []
        own = self.sequences if self.sequences is not None else [None] * len(prompts)
        out: list[int] = []
        for p, seqs in zip(prompts, own, strict=True):
            out += self.prompt_items[kind][p]
            for s in [] if seqs is None else [seqs] if isinstance(seqs, int) else seqs:
                out += self.own_items[kind][s]
        return out
