"""Per-token log-probabilities and entropy of responses under a model (teacher forcing).

:class:`PolicyForward` is the one entry for "log-probs of responses under a model": it holds what
every such pass needs (the model, its dummy vision pass, the frozen tower's feature cache, the
banned ids, the sampling temperature, the micro-batch packing and the model's sequence-parallel
group), so a pass takes only its rows (:class:`ResponseRows`). The trainer builds one for the
policy and one for a reference model; :func:`response_logprobs` is a one-off pass.

A forward lays its rows out one of three ways, all giving the same values: padded (one row per
sequence), packed (``models/packing.py``: the sequences in one row), or shared (rows that hold
each prompt once, :attr:`ResponseRows.blocks`: the prompt once in the row, its responses after
it, ``models/shared_prefix.py``).
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .chunked_logits import logprobs_and_entropy, logprobs_at, top_logprobs
from .inputs import append_responses, compute_device
from .packing import Packed, needs_blocks, pack, pack_shared
from .sequence_parallel import gather_tokens, group_of, shard_bounds
from .shared_prefix import install as install_shared_prefix
from .vision import DummyVisionPass
from .vision_cache import VisionFeatureCache


def token_logprobs(
    logits: torch.Tensor,
    ids: torch.Tensor,
    banned: list[int] | None = None,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
):
    """(log p(ids), entropy) from ``logits [N, T, V]`` divided by ``temperature``, in float32, with
    ``banned`` token ids at -inf (``chunked_logits``: no full float32 copy of the logits).

    Generation never samples banned ids (vision placeholders), so the training distribution must
    exclude them too, or sampled and recomputed log-probs disagree. The entropy is a metric: it
    comes back detached.
    """
    logp, entropy = logprobs_and_entropy(logits, ids, banned=banned, temperature=temperature)
    if mask is not None:
        # padding may hold a banned id (-inf): zero it so masking never makes NaN; a non-finite value
        # on a real token stays visible (the update then skips the step and counts it)
        logp = torch.where(mask.bool(), logp, 0.0)
    return logp, entropy.detach()


@dataclass(frozen=True)
class Packing:
    """How a pass's sequences are grouped into forwards; changes speed and memory, not values."""

    padding_free: bool = False
    """Pack each micro-batch's sequences into one row (``models/packing.py``)."""
    max_tokens: int = 0
    """> 0: micro-batches by this token budget (``trainer.max_tokens_per_micro_batch``)."""
    micro_batch_size: int = 16
    """Sequences per micro-batch when there is no token budget."""
    shared_prefix: str = "off"
    """``on``, ``auto`` or ``off``: lay a micro-batch out with every prompt once, its responses
    after it (``models/shared_prefix.py``); see :meth:`shares`."""

    def shares(self, prompts: list[int]) -> bool:
        """Whether a forward of sequences answering ``prompts`` (a prompt index per sequence) lays
        each prompt out once: always (``on``), or where a prompt repeats (``auto``)."""
        if self.shared_prefix == "on":
            return True
        return self.shared_prefix == "auto" and len(set(prompts)) < len(prompts)


@dataclass
class ResponseRows:
    """The sequences of one forward: prompt rows and the responses that follow them.

    ``real`` marks the responses' real tokens (attended, and given a log-prob): for an episode,
    its tool turns too (``types`` types their vision tokens); the caller's loss mask keeps the
    policy's own. ``media_counts`` (videos, images of each row of ``inputs``) is what a packed
    forward needs; ``prompt_ids`` (each row's prompt index in a started vision cache's batch) and
    ``sequence_ids`` (each row's sequence, or sequences, whose own media follow its prompt's: an
    episode's tool turns) what a served one needs.

    Two shapes: one row of ``inputs`` per sequence (``blocks`` None), or, for a shared-prefix
    forward, one row per prompt and ``blocks[s]`` the row sequence ``s`` answers (the sequences
    of a row consecutive), with ``own_counts`` the (videos, images) each sequence adds.
    """

    inputs: dict
    ids: torch.Tensor  # [N, T] response ids
    real: torch.Tensor  # [N, T]
    media_counts: tuple[list[int], list[int]] | None = None
    prompt_ids: list[int] | None = None
    sequence_ids: list[int] | list[list[int]] | None = None
    types: torch.Tensor | None = None  # [N, T] the responses' mm_token_type_ids
    blocks: list[int] | None = None
    own_counts: tuple[list[int], list[int]] | None = None
    # distillation readouts beside the sampled tokens' log-probs (:class:`Readout`)
    top_k: int = 0  # the model's ``top_k`` most likely ids per response position (a teacher's)
    at_ids: torch.Tensor | None = None  # [N, T, k] ids whose log-probs to read (a student's, with gradient)


@dataclass
class Readout:
    """What one pass reads from its logits at each response position."""

    logp: torch.Tensor  # [N, T] log p of the sampled token
    entropy: torch.Tensor  # [N, T], detached
    top_ids: torch.Tensor | None = None  # [N, T, k]: the most likely ids (``rows.top_k``), no gradient
    top_logp: torch.Tensor | None = None  # [N, T, k]: their log-probs
    at_logp: torch.Tensor | None = None  # [N, T, k]: log p of ``rows.at_ids``, with gradient

    def extras(self, logits, ids_at, top_k: int, banned, temperature, place) -> None:
        """Fill the top-k / at-ids readouts from ``logits [B, L, V]`` (``ids_at [B, L, k]``);
        ``place`` puts a ``[B, L, k]`` result in its ``[N, T, k]`` place."""
        if top_k:
            ids, top = top_logprobs(logits, top_k, banned=banned, temperature=temperature)
            self.top_ids, self.top_logp = place(ids), place(top)
        if ids_at is not None:
            self.at_logp = place(logprobs_at(logits, ids_at, banned=banned, temperature=temperature))


@dataclass(frozen=True)
class PolicyForward:
    """What every log-prob pass over ``model`` needs; :meth:`logprobs` is the pass.

    The reference model is a second instance (:meth:`of`); a LoRA policy's adapter-disabled
    reference is this instance inside ``models.lora.reference_forward``.
    """

    model: torch.nn.Module
    dummy: DummyVisionPass | None = None
    """Vision-tower passes for batches without media (every backward reaches the whole tower)."""
    vision: VisionFeatureCache | None = None
    """A frozen tower's features, served to the forwards while it is started."""
    banned: list[int] | None = None
    """Token ids generation never samples (vision placeholders): -inf here too."""
    temperature: float = 1.0
    packing: Packing = field(default_factory=Packing)
    sp: object | None = field(default=None, init=False, compare=False)
    """The model's sequence-parallel group (``models/sequence_parallel.py``), or None."""

    def __post_init__(self):
        object.__setattr__(self, "sp", group_of(self.model))

    def of(self, model: torch.nn.Module, dummy: DummyVisionPass | None) -> PolicyForward:
        """The same pass over another model (the reference) with its own dummy vision pass."""
        return dataclasses.replace(self, model=model, dummy=dummy)

    def logprobs(self, rows: ResponseRows) -> tuple[torch.Tensor, torch.Tensor]:
        """(logp [N, T], entropy [N, T]) of each response token of ``rows`` given its prompt.

        Packed (``packing.padding_free``), shared (``rows.blocks``) and served (a started
        ``vision`` cache) forwards give the padded, re-encoding forward's values (within float
        tolerance).
        """
        out = self.readout(rows)
        return out.logp, out.entropy

    def readout(self, rows: ResponseRows) -> Readout:
        """:meth:`logprobs` with the distillation readouts ``rows`` asks for (``top_k``,
        ``at_ids``), from the same forward."""
        if self.sp is not None and (rows.top_k or rows.at_ids is not None):
            raise ValueError("top-k readouts are not split over a sequence-parallel group")
        serve = self.vision is not None and self.vision.active
        if serve and rows.prompt_ids is None:
            raise ValueError("a vision feature cache needs the prompt index of every sequence")
        with self.vision.serving(rows.prompt_ids, rows.sequence_ids) if serve else nullcontext():
            # a served forward calls no tower, so no dummy either (the frozen tower needs no gradient)
            expect = self.dummy.expect if self.dummy is not None and not serve else None
            if rows.blocks is not None:
                return self._shared(rows, expect)
            if self.packing.padding_free:
                if rows.media_counts is None:
                    raise ValueError("padding-free log-probs need each sequence's media counts")
                if needs_blocks(self.model):  # each sequence a block of its own
                    return self._shared(dataclasses.replace(rows, blocks=list(range(len(rows.ids)))), expect)
                return self._packed(rows, expect)
            return self._padded(rows, expect)

    def _padded(self, rows: ResponseRows, expect):
        model, device = self.model, compute_device(self.model)  # inputs are built on the CPU
        full = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in rows.inputs.items()}
        response_ids, response_mask = rows.ids.to(device), rows.real.to(device)
        types = None if rows.types is None else rows.types.to(device)
        full = append_responses(full, response_ids, response_mask, types)
        prompt_len = rows.inputs["input_ids"].shape[1]
        T = response_ids.shape[1]
        with expect(full) if expect is not None else nullcontext():
            # only the positions that predict response tokens go through the LM head: full-vocabulary
            # logits over a 4k-token video prompt would be ~1.2 GB (bf16, 151k vocab) per sequence
            out = model(**full, use_cache=False, logits_to_keep=T + 1)
        assert full["input_ids"].shape[1] == prompt_len + T
        if self.sp is not None:  # sequence parallelism: this rank's share of the T + 1 kept positions
            return Readout(*self._gathered(out.logits, response_ids, response_mask, T + 1, T))
        logits = out.logits[:, :T]
        read = Readout(*token_logprobs(logits, response_ids, self.banned, response_mask, self.temperature))
        at = None if rows.at_ids is None else rows.at_ids.to(device)
        keep = response_mask.bool().unsqueeze(-1)
        read.extras(logits, at, rows.top_k, self.banned, self.temperature, lambda x: torch.where(keep, x, 0))
        return read

    def _packed(self, rows: ResponseRows, expect):
        videos, images = rows.media_counts
        packed = pack(self.model, rows.inputs, rows.ids, rows.real, videos, images, rows.types)
        return self._kept(rows, packed, expect)

    def _shared(self, rows: ResponseRows, expect):
        if rows.media_counts is None:
            raise ValueError("shared-prefix log-probs need each prompt row's media counts")
        install_shared_prefix(self.model)
        packed = pack_shared(
            self.model,
            rows.inputs,
            rows.blocks,
            rows.ids,
            rows.real,
            rows.media_counts,
            rows.own_counts,
            rows.types,
        )
        return self._kept(rows, packed, expect, shared_layout=packed.layout)

    def _kept(self, rows: ResponseRows, packed: Packed, expect, **extra):
        """The forward of one packed row; each kept position's log-prob back in its response's place."""
        model, device = self.model, compute_device(self.model)
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in packed.inputs.items()}
        with expect(inputs) if expect is not None else nullcontext():
            # a tensor logits_to_keep selects exactly the positions that predict response tokens
            out = model(**inputs, use_cache=False, logits_to_keep=packed.keep.to(device), **extra)
        index = (packed.rows.to(device), packed.cols.to(device))
        ids = rows.ids.to(device)[index]
        if self.sp is not None:  # sequence parallelism: this rank's share of the kept positions
            kept = ids.shape[0]
            lp, ent = self._gathered(out.logits, ids[None], None, kept, kept)
        else:
            lp, ent = token_logprobs(out.logits, ids[None], self.banned, temperature=self.temperature)
        read = Readout(
            lp.new_zeros(rows.ids.shape).index_put(index, lp[0]),
            ent.new_zeros(rows.ids.shape).index_put(index, ent[0]),
        )
        if rows.top_k or rows.at_ids is not None:
            at = None if rows.at_ids is None else rows.at_ids.to(device)[index][None]

            def place(x: torch.Tensor) -> torch.Tensor:
                return x.new_zeros((*rows.ids.shape, x.shape[-1])).index_put(index, x[0])

            read.extras(out.logits, at, rows.top_k, self.banned, self.temperature, place)
        return read

    def _gathered(self, logits, ids, mask, kept: int, width: int):
        """Log-probs and entropy of this rank's share of the ``kept`` positions (its LM head
        computed only those logits), gathered over the sequence-parallel group: ``[B, width]`` on
        every rank."""
        sp = self.sp
        start, stop = shard_bounds(kept, sp)
        pad = stop - ids.shape[1]
        if pad > 0:
            ids, mask = F.pad(ids, (0, pad)), (None if mask is None else F.pad(mask, (0, pad)))
        lp, ent = token_logprobs(
            logits,
            ids[:, start:stop],
            self.banned,
            None if mask is None else mask[:, start:stop],
            self.temperature,
        )
        return gather_tokens(lp, sp, kept)[:, :width], gather_tokens(ent, sp, kept)[:, :width]


def response_logprobs(
    model,
    seq_inputs: dict,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    banned: list[int] | None = None,
    temperature: float = 1.0,
    dummy: DummyVisionPass | None = None,
    *,
    response_types: torch.Tensor | None = None,
):
    """(logp [N, T], entropy [N, T]) of each response token given its prompt: one padded
    :meth:`PolicyForward.logprobs` pass over ``model`` (what a check outside the trainer needs)."""
    forward = PolicyForward(model, dummy, banned=banned, temperature=temperature)
    return forward.logprobs(ResponseRows(seq_inputs, response_ids, response_mask, types=response_types))
