"""Memory per GPU of each phase of a step: an analytic model with measured constants.

Every term is a count of tensor elements times their bytes, named after what holds the memory
(:class:`Phase` ``parts``). The counts come from the architecture (``architecture.py``: exact
parameter counts of the real model built without weights), the run's settings and the planned
micro-batch (``workload.py``). What is not exact is the activations: the elements each decoder
layer and vision block keeps for its backward, in units of the width they scale with, read off the
forward of the models this project trains (Qwen-style decoder: RMSNorm, GQA attention with q/k
norms and rotary embeddings, SwiGLU MLP; a ViT tower with a patch merger) and checked against
peaks measured on the CPU by ``benchmarks/plan_accuracy.py`` (:data:`ACTIVATION_UNITS`).

The phases, in a step's order (``docs/how-to/gpu.md``, "The order of a step"):

- ``generate``: the engine awake beside the trainer's resident state;
- ``engine asleep``: the trainer's resident state alone (the engine's memory freed, level 2);
- ``logprobs``: the old (and reference) log-prob passes: forwards without gradient;
- ``update``: the forward and backward of the largest micro-batch with the gradients held, and the
  optimizer step;
- ``wake and push``: the engine's weights woken and every weight gathered and copied in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..models.chunked_logits import chunk_rows
from .architecture import Architecture
from .workload import MicroBatch, Workload

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# Elements kept per token by one decoder layer's forward for its backward, per unit of the width
# they scale with: the hidden size H, the query width (heads x head_dim), the key/value width and
# the MLP width. Attention: the q/k/v projections, their norms, the rotary embedding's halves and
# results, the attention output and its contiguous copy; the MLP: gate, its activation, up, their
# product; the two norms' outputs and the residual. A norm keeps a float32 copy of its input when
# it computes in a narrower dtype (``NORM_UPCAST``).
ACTIVATION_UNITS = {"hidden": 4.0, "query": 6.0, "kv": 5.0, "mlp": 4.0}
# Per element of a normalised width, the extra float32 copy (in units of the compute dtype's bytes
# over 4) a norm keeps: the two layer norms on H, the q/k norms on their widths.
NORM_UPCAST = {"hidden": 2.0, "query": 1.0, "kv": 1.0}
# A forward without gradient holds one layer's temporaries at a time: the MLP's three widest
# (activation, up, product) and a few hidden-width tensors (the residual, the norm, the output).
FORWARD_UNITS = {"hidden": 3.0, "mlp": 3.0}
# The backward of one recomputed layer holds, beside its activations, gradients of the hidden
# width (in and out) and two of the MLP width.
BACKWARD_UNITS = {"hidden": 2.0, "mlp": 2.0}
# A vision block keeps per patch: its norms (input and output), q/k/v and the rotary halves, the
# attention output and its copy, the residual (12 x its width), the MLP's input and activation
# (2 x the MLP width). A merger keeps about 4 x (the width) per patch; its output one feature per token.
VISION_UNITS = {"hidden": 12.0, "mlp": 2.0, "merger": 4.0}
# Before its blocks the tower makes a copy of its input pixels (cast to the compute dtype, which the
# patch embedding keeps for its backward; in float32 the convolution's own reordered copy) and,
# while it interpolates its position embeddings, about four tensors of its width per patch.
VISION_INPUT = {"pixels": 1.0, "positions": 4.0}
PIXEL_CHANNELS = 3
# The chunked log-softmax (``models/chunked_logits.py``) holds two float32 chunks of positions at once.
LOGITS_CHUNKS = 2


@dataclass(frozen=True)
class Precision:
    """Bytes per element of the trainer's tensors (from ``model.dtype`` and ``distributed``)."""

    master: int  # parameters, gradients (model.dtype)
    compute: int  # activations, gathered parameters (distributed.param_dtype, else model.dtype)
    reduce: int  # gradients as FSDP2 reduces them
    engine: int  # the rollout engine's copy (rollout.vllm.dtype)

    @classmethod
    def of(cls, cfg) -> Precision:
        master = DTYPE_BYTES[cfg.model.dtype]
        compute = DTYPE_BYTES[cfg.distributed.param_dtype] if cfg.distributed.param_dtype else master
        return cls(
            master, compute, DTYPE_BYTES[cfg.distributed.reduce_dtype], DTYPE_BYTES[cfg.rollout.vllm.dtype]
        )


@dataclass
class Phase:
    """One phase's memory on one GPU: ``parts`` (name -> bytes) and their sum.

    ``detail`` names what the peak was planned for (the micro-batch composition, the moment)."""

    name: str
    parts: dict[str, float] = field(default_factory=dict)
    detail: str = ""

    @property
    def peak_bytes(self) -> float:
        return sum(self.parts.values())

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    @property
    def parts_gib(self) -> dict[str, float]:
        return {k: v / GIB for k, v in self.parts.items()}


@dataclass(frozen=True)
class Sharding:
    """How the trainer's model states spread over the GPUs."""

    fsdp: bool  # FSDP2 (torchrun), else one plain process
    shards: int  # ranks each parameter is split over
    offload: bool  # distributed.cpu_offload: the shards live in host memory
    autocast: bool  # one process computing in a narrower dtype than its masters

    @classmethod
    def of(cls, cfg, gpus: int, precision: Precision) -> Sharding:
        fsdp = gpus > 1 or cfg.distributed.group_with_one_rank
        return cls(
            fsdp=fsdp,
            shards=gpus if fsdp else 1,
            offload=fsdp and cfg.distributed.cpu_offload,
            autocast=not fsdp and precision.compute != precision.master,
        )


@dataclass(frozen=True)
class ModelStates:
    """Elements of the policy's states: all its parameters and the trained ones."""

    total: int
    trainable: int

    @classmethod
    def of(cls, cfg, arch: Architecture) -> ModelStates:
        p = arch.params
        lora = cfg.model.lora
        if lora.rank > 0:
            adapters = p.lora_params(lora.rank, list(lora.target_modules), lora.vision)
            return cls(p.total + adapters, adapters)
        frozen = p.vision if cfg.model.freeze_vision_tower else 0
        return cls(p.total, p.total - frozen)


def layer_activations(arch: Architecture, tokens: int, compute: int) -> float:
    """Bytes one decoder layer keeps for its backward at ``tokens`` tokens (no checkpointing)."""
    t = arch.text
    widths = _widths(arch)
    upcast = (4 - compute) / compute if compute < 4 else 0.0  # a float32 copy, in compute units
    units = sum(ACTIVATION_UNITS[k] * widths[k] for k in ACTIVATION_UNITS)
    units += upcast * sum(NORM_UPCAST[k] * widths[k] for k in NORM_UPCAST)
    if t.experts:
        units += t.experts  # router logits
    return tokens * units * compute


def _widths(arch: Architecture) -> dict[str, int]:
    t = arch.text
    mlp = t.intermediate
    if t.experts:  # the experts a token is routed to, and the shared expert
        mlp = t.experts_per_token * t.expert_intermediate + t.shared_expert_intermediate
    return {"hidden": t.hidden, "query": t.heads * t.head_dim, "kv": t.kv_heads * t.head_dim, "mlp": mlp}


def _units(units: dict[str, float], widths: dict[str, int]) -> float:
    return sum(u * widths[k] for k, u in units.items())


def vision_activations(
    arch: Architecture, mb: MicroBatch, compute: int, checkpointing: bool, grad: bool
) -> float:
    """Bytes the vision tower holds for the micro-batch's ``patches``: its input pixels, and with
    gradient what its backward needs (each block's input under checkpointing, else every block's
    activations), one block's working set and the mergers'; without, the larger of one block's
    working set and the position embeddings' interpolation, and the features."""
    v = arch.vision
    n = mb.patches
    if n == 0:
        return 0.0
    block = n * (VISION_UNITS["hidden"] * v.hidden + VISION_UNITS["mlp"] * v.intermediate)
    features = mb.media_tokens * (1 + v.deepstack) * v.out_hidden
    pixels = VISION_INPUT["pixels"] * n * PIXEL_CHANNELS * v.temporal_patch_size * v.patch_size**2
    if not grad:
        embedding = n * VISION_INPUT["positions"] * v.hidden
        return (pixels + max(block, embedding) + features + n * v.hidden) * compute
    mergers = (1 + v.deepstack) * VISION_UNITS["merger"] * n * v.hidden
    kept = v.depth * n * v.hidden if checkpointing else v.depth * block
    cast = (
        pixels if compute < 4 else 0
    )  # the backward keeps the input's cast copy (float32: the input itself)
    return (cast + kept + block + mergers + features) * compute


def logits_bytes(arch: Architecture, mb: MicroBatch, compute: int, device: str, grad: bool) -> float:
    """The LM head's logits for the kept positions, the chunked log-softmax's two float32 chunks
    and, in the backward, the logits' gradient. On a CPU the gradient's pages count only once
    written (a chunk at a time, ``torch.empty`` touches none), which a resident-set peak sees."""
    vocab = arch.text.vocab
    logits = mb.kept * vocab * compute
    per_row = math.ceil(mb.kept / mb.rows)  # chunks are cut within each row
    chunk = min(per_row, chunk_rows(vocab))
    buffers = LOGITS_CHUNKS * chunk * vocab * 4
    if not grad:
        return logits + buffers
    if device != "cpu":
        return 2 * logits + buffers
    last = per_row - chunk * ((per_row - 1) // chunk)  # the last chunk's positions
    written = (mb.kept - last) * vocab * compute  # the gradient written before the last chunk
    return logits + max(buffers, written + LOGITS_CHUNKS * last * vocab * 4)


def mask_bytes(mb: MicroBatch, compute: int) -> float:
    """An explicit attention mask: boolean, and the additive copy SDPA makes of it."""
    return mb.mask_elements * (1 + compute)


@dataclass(frozen=True)
class Planner:
    """Everything a phase's memory depends on; :meth:`phases` computes them."""

    cfg: object
    arch: Architecture
    work: Workload
    gpus: int
    memory_bytes: float
    reserved_bytes: float
    device: str = "cuda"
    teacher: Architecture | None = None  # a distillation teacher checkpoint's (``algorithm.distill``)

    @property
    def precision(self) -> Precision:
        return Precision.of(self.cfg)

    @property
    def sharding(self) -> Sharding:
        return Sharding.of(self.cfg, self.gpus, self.precision)

    @property
    def states(self) -> ModelStates:
        return ModelStates.of(self.cfg, self.arch)

    def resident(self) -> dict[str, float]:
        """What the trainer holds between passes: its masters, AdamW's two moments, a reference,
        a distillation teacher."""
        p, s, states = self.precision, self.sharding, self.states
        on_gpu = 0 if s.offload else 1
        parts = {
            "weights": on_gpu * states.total * p.master / s.shards,
            "optimizer": on_gpu * 2 * states.trainable * 4 / s.shards,  # AdamW moments in float32
        }
        distill = self.cfg.algorithm.distill
        reference = self.cfg.algorithm.kl.enabled or (
            distill.teacher == "self" and distill.self_teacher == "reference"
        )
        if reference and self.cfg.model.lora.rank == 0:  # a frozen copy
            parts["reference"] = on_gpu * states.total * p.compute / s.shards
        if self.teacher is not None:  # frozen, in the compute dtype, sharded like the policy (or offloaded)
            parts["teacher"] = (
                (0 if distill.offload else 1) * self.teacher.params.total * p.compute / s.shards
            )
        if self.cfg.rollout.engine == "hf" and (s.fsdp or s.autocast):
            parts["rollout copy"] = states.total * p.compute  # the HF engine's full copy
        if self.reserved_bytes:
            parts["reserved"] = self.reserved_bytes
        return parts

    # --- the engine -------------------------------------------------------------------------
    def engine_share(self) -> float:
        return self.cfg.rollout.vllm.memory_share(colocated=True)

    def engine_parts(self) -> dict[str, float]:
        """vLLM's memory: ``gpu_memory_utilization`` of the GPU, spent on its weights, its
        profiled activations, CUDA graphs, and the KV cache (the rest). The HF engine's: the KV
        cache of all the rank's sequences, generated in one batch, and the last step's logits."""
        if self.cfg.rollout.engine == "hf":
            return self.hf_generation()
        if self.cfg.rollout.engine != "vllm" or self.device == "cpu":
            return {}
        total = self.engine_share() * self.memory_bytes
        weights = self.engine_weights()
        activations = self.engine_activations()
        graphs = 0 if self.cfg.rollout.vllm.enforce_eager else 0.5 * GIB
        return {
            "engine weights": weights,
            "engine activations": activations,
            "engine graphs": graphs,
            "kv cache": max(0.0, total - weights - activations - graphs),
        }

    def hf_generation(self) -> dict[str, float]:
        w, t = self.work, self.arch.text
        sequences = w.prompts_per_rank * w.n
        per_token = 2 * t.attention_layers * t.kv_heads * t.head_dim * self.precision.compute
        state = t.linear_layers * t.linear_state_elements * self.precision.compute
        return {
            "hf kv cache": sequences * ((w.prompt + w.response) * per_token + state),
            "hf logits": sequences * t.vocab * 4,
        }

    def engine_weights(self) -> float:
        return self.arch.params.total * self.precision.engine / self.cfg.rollout.vllm.tensor_parallel_size

    def engine_activations(self) -> float:
        """vLLM's profiling run: a forward of ``max_num_batched_tokens`` (8,192) tokens, the
        sampler's float32 logits of 256 sequences, and the encoder on the largest video."""
        widths = _widths(self.arch)
        e = self.precision.engine
        lm = 8192 * _units(FORWARD_UNITS, widths) * e
        sampler = 256 * self.arch.text.vocab * 4
        v = self.arch.vision
        tower = self.work.video_patches * (3 * v.hidden + v.intermediate) * e
        return max(lm, tower) + sampler

    def kv_bytes_per_token(self) -> float:
        t = self.arch.text
        tp = self.cfg.rollout.vllm.tensor_parallel_size
        return 2 * t.attention_layers * t.kv_heads * t.head_dim * self.precision.engine / tp

    @property
    def vllm(self) -> bool:
        return self.cfg.rollout.engine == "vllm" and self.device != "cpu"

    def engine_awake_in_passes(self) -> dict[str, float]:
        """vLLM's memory during the trainer's passes: none when it sleeps between phases (the HF
        engine's cache is gone when generation returns)."""
        if not self.vllm or self.cfg.rollout.vllm.sleep_between_phases:
            return {}
        return self.engine_parts()

    # --- the trainer's passes ---------------------------------------------------------------
    def gathered(self, backward: bool) -> float:
        """FSDP2's all-gathered parameters: the root module's (embeddings, LM head, mergers: held
        for the whole forward and backward) and two shard units (the one computing, the next
        prefetched). In the backward also the root's gradients (reduced only when the backward
        ends) and one unit's, in the compute dtype and as cast for the reduce-scatter. One process
        with autocast instead keeps a compute-dtype copy of every weight it cast in the forward."""
        p, s, params = self.precision, self.sharding, self.arch.params
        if s.autocast:
            return self.states.total * p.compute
        if not s.fsdp:
            return 0.0
        units = 2 * params.largest_unit
        if not self.cfg.distributed.reshard_after_forward:
            units = params.total - params.root_unit  # every layer stays gathered until its backward
        out = (params.root_unit + units) * p.compute
        if backward:
            out += params.root_unit * p.compute + params.largest_unit * (p.compute + p.reduce)
        return out

    def logprobs(self, mb: MicroBatch) -> dict[str, dict[str, float]]:
        """A forward without gradient, stage by stage: what every stage holds (``held``), then the
        tower's forward, a decoder layer's, the LM head's logits and their log-softmax."""
        c = self.precision.compute
        widths = _widths(self.arch)
        features = mb.media_tokens * (1 + self.arch.vision.deepstack) * self.arch.vision.out_hidden * c
        return {
            "held": {
                "gathered weights": self.gathered(backward=False),
                "attention mask": mask_bytes(mb, c),
                "activations": mb.tokens * widths["hidden"] * c,  # the residual stream
            },
            "the vision tower": {"vision": vision_activations(self.arch, mb, c, False, grad=False)},
            "a decoder layer": {
                "activations": mb.tokens * _units(FORWARD_UNITS, widths) * c,
                "vision": features,
            },
            "the logits": {"logits": logits_bytes(self.arch, mb, c, self.device, grad=False)},
        }

    def backward(self, mb: MicroBatch) -> dict[str, dict[str, float]]:
        """The update's forward and backward, stage by stage: what the backward keeps (each layer's
        input under checkpointing, else every layer's activations; the tower's), then the
        forward's logits, the logits' backward, and a layer's backward (recomputed)."""
        c = self.precision.compute
        widths = _widths(self.arch)
        t = self.arch.text
        checkpointing = self.cfg.model.gradient_checkpointing
        layer = layer_activations(self.arch, mb.tokens, c)
        kept = t.layers * mb.tokens * t.hidden * c if checkpointing else t.layers * layer
        working = mb.tokens * _units(BACKWARD_UNITS, widths) * c
        return {
            "held": {
                "gathered weights": self.gathered(backward=True),
                "attention mask": mask_bytes(mb, c),
                "activations": kept,
                "vision": vision_activations(self.arch, mb, c, checkpointing, grad=True),
            },
            "the forward's logits": {"logits": logits_bytes(self.arch, mb, c, self.device, grad=False)},
            "the logits' backward": {"logits": logits_bytes(self.arch, mb, c, self.device, grad=True)},
            # the logits are freed; their gradient, and the LM head's new weight gradient before it
            # is added to the held one (FSDP2: in the gathered root's)
            "the LM head's backward": {
                "logits": mb.kept * self.arch.text.vocab * c,
                "gradients": 0.0 if self.sharding.fsdp else self.lm_head_elements() * self.precision.master,
            },
            "a layer's backward": {"layer backward": (layer if checkpointing else 0.0) + working},
        }

    def lm_head_elements(self) -> int:
        return self.arch.text.vocab * self.arch.text.hidden

    def gradients(self) -> float:
        s = self.sharding
        return 0 if s.offload else self.states.trainable * self.precision.master / s.shards

    def optimizer_step(self) -> dict[str, float]:
        """AdamW's step: multi-tensor (``foreach``) on GPUs keeps a temporary as large as the
        moments of one shard; the CPU's per-parameter loop two of the largest parameter."""
        s = self.sharding
        if s.offload:
            return {}
        if self.device == "cpu":  # the per-parameter loop: sqrt and its quotient, each a new tensor
            temp = 2 * self.arch.params.largest_tensor * 4
        else:
            temp = self.states.trainable * 4 / s.shards
        return {"optimizer step": temp}

    def push(self) -> dict[str, float]:
        """The weight push: one full tensor at a time gathered in the masters' dtype and cast."""
        largest = self.arch.params.largest_tensor
        return {"push buffer": largest * (self.precision.master + self.precision.engine)}

    # --- the phases ---------------------------------------------------------------------------
    def phases(self) -> list[Phase]:
        resident = self.resident()
        engine = self.engine_parts()
        awake = self.engine_awake_in_passes()
        out = [Phase("generate", {**resident, **engine}, "the engine awake, KV cache mapped")]
        out.append(Phase("engine asleep", {**resident, **awake}, "between generation and the passes"))
        out.append(self._worst("logprobs", {**resident, **awake}, self.logprobs))
        grads = {"gradients": self.gradients()}
        update = self._worst("update", {**resident, **awake, **grads}, self.backward)
        step = Phase("update", {**resident, **awake, **grads, **self.optimizer_step()}, "the optimizer step")
        out.append(update if update.peak_bytes >= step.peak_bytes else step)
        if self.vllm:
            woken = {k: v for k, v in engine.items() if k == "engine weights"}
            out.append(
                Phase(
                    "wake and push", {**resident, **woken, **self.push()}, "weights woken, KV cache not yet"
                )
            )
        return out

    def _worst(self, name: str, base: dict[str, float], stages_of) -> Phase:
        """The phase ``name`` at its largest stage, for the micro-batch composition that needs the
        most memory."""
        best = None
        for mb in self.work.micro_batches:
            parts, stage = peak_parts(stages_of(mb))
            for part, value in base.items():
                parts[part] = parts.get(part, 0.0) + value
            phase = Phase(name, parts, f"{mb.name}: {mb.tokens:,} tokens, {mb.kept:,} kept; at {stage}")
            if best is None or phase.peak_bytes > best.peak_bytes:
                best = phase
        return best


def peak_parts(stages: dict[str, dict[str, float]]) -> tuple[dict[str, float], str]:
    """A pass's parts at its largest stage: what every stage holds (``held``) plus that stage's
    own; and the stage's name."""
    held = stages["held"]
    own = {k: v for k, v in stages.items() if k != "held"}
    stage = max(own, key=lambda k: sum(own[k].values()))
    parts = dict(held)
    for part, value in own[stage].items():
        parts[part] = parts.get(part, 0.0) + value
    return parts, stage
