"""Configuration of the rollout engines (the ``rollout`` section of the run config), beside them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..validation import at_least, in_range, non_negative, one_of, require, whole_number
from .cpu_kv_cache import AUTO, parse_setting
from .engines import ENGINES
from .sampling import TRAIN_MAX_NEW_TOKENS, SamplingConfig


@dataclass
class VLLMConfig:
    """The vLLM engine, for training rollouts (``rollout.engine=vllm``: one colocated engine per
    rank) and for ``eval`` / ``filter`` (``--engine vllm``) alike: one section, one set of defaults.

    Parameters:
        gpu_memory_utilization: Share of the GPU vLLM may take (weights + KV cache). Unset: 0.5 when
            the engine shares the GPU with the trainer, 0.9 when it is alone (``eval``, ``filter``).
            Not used on CPUs: ``cpu_kv_cache_gib`` sizes the cache there.
        cpu_kv_cache_gib: On CPUs, each engine's KV cache in GiB, or ``auto``: a quarter of the
            memory available at start-up, shared by the engines on this machine (ranks x copies),
            within [0.5, 16] GiB. A size the engines cannot fit in the available memory is refused
            at start-up; ``VLLM_CPU_KVCACHE_SPACE`` set in the environment wins. Each engine prints
            its choice ("vLLM on CPU: KV cache N GiB (...)"). Ignored on GPUs.
        tensor_parallel_size: GPUs per engine.
        data_parallel_size: ``eval`` / ``filter``: engine copies behind one front end (GPUs = dp x tp).
        enforce_eager: Skip CUDA-graph capture (faster start-up, slower decoding).
        in_process: Run vLLM's engine core in the trainer process (starts in seconds, weights are
            pushed by reference); false uses vLLM's worker processes (weights travel as bytes).
        sleep_between_phases: Release the engine's GPU memory during the update (vLLM sleep mode;
            ignored where the platform lacks it).
        max_model_len: Prompt + response token limit (0: the model's own limit).
        lora_sync: With ``model.lora``: ``merged`` pushes ``W + scaling * B @ A`` for every adapted
            weight after each update; ``adapter`` runs the engine with vLLM's LoRA support and
            sends only the adapter (PEFT files, language-model targets only).
        dtype: The training engine's weights and compute (``bfloat16``, ``float32``, ``float16``
            or ``auto``: the checkpoint's), independent of the trainer's fp32 master weights;
            pushed weights are cast to it. Match the trainer's compute dtype
            (``distributed.param_dtype``) so sampled and recomputed log-probs compare like with
            like (``rollout/logprob_gap_*``). ``eval`` and ``filter`` take ``--dtype`` instead.
    """

    gpu_memory_utilization: float | None = None
    cpu_kv_cache_gib: str = AUTO
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enforce_eager: bool = False
    in_process: bool = True
    sleep_between_phases: bool = False
    max_model_len: int = 0
    lora_sync: str = "merged"
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        one_of("rollout.vllm.lora_sync", self.lora_sync, ("merged", "adapter"))
        one_of("rollout.vllm.dtype", self.dtype, ENGINE_DTYPES)
        if self.gpu_memory_utilization is not None:
            in_range("rollout.vllm.gpu_memory_utilization", self.gpu_memory_utilization, 0, 1, low_open=True)
        parse_setting(self.cpu_kv_cache_gib)
        at_least("rollout.vllm.tensor_parallel_size", self.tensor_parallel_size, 1)
        at_least("rollout.vllm.data_parallel_size", self.data_parallel_size, 1)
        non_negative("rollout.vllm.max_model_len", self.max_model_len)

    def memory_share(self, colocated: bool) -> float:
        """``gpu_memory_utilization``, or its default for an engine beside a trainer or alone."""
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return COLOCATED_MEMORY_SHARE if colocated else ALONE_MEMORY_SHARE


@dataclass
class PipelineSettings:
    """Throughput knobs of the pipeline (they never change a result).

    Attributes:
        load_workers: Loader processes; 0 loads in a thread of this process (no fork).
        queue_size: Loaded samples waiting for the engine (bounds memory on long videos).
        max_in_flight: Requests submitted and not yet finished.
        score_workers: Threads that score finished requests (0: the pipeline's own thread). Set
            to the endpoint judge's ``max_concurrency`` when a judge scores, so its requests
            overlap each other and the generation.
    """

    load_workers: int = 2
    queue_size: int = 8
    max_in_flight: int = 64
    score_workers: int = 0


# vLLM's share of GPU memory when unset: leave a colocated trainer room; take most of it alone
COLOCATED_MEMORY_SHARE = 0.5
# batches an async run may keep in flight: each holds a whole step's rollouts in memory
MAX_STALENESS = 8
# the largest group: a step generates, holds and scores all its groups at once
MAX_GROUP_SIZE = 1024
ALONE_MEMORY_SHARE = 0.9
ENGINE_DTYPES = ("bfloat16", "float32", "float16", "auto")


ROLLOUT_MODES = ("sync", "one_step_off", "async")


@dataclass
class RolloutConfig(SamplingConfig):
    """Sampling responses, and hybrid offline/online groups.

    The sampling keys (``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``,
    ``min_new_tokens``, ``presence_penalty``) are :class:`~.sampling.SamplingConfig`'s.

    Parameters:
        vllm: The vLLM engine's settings (``rollout.vllm.*``, :class:`VLLMConfig`), also read by
            ``eval`` and ``filter`` with ``--engine vllm``.
        engine: ``hf`` (transformers ``generate``, any machine) or ``vllm`` (``vllm`` on GPUs,
            ``vllm-cpu`` on CPUs; settings under ``rollout.vllm``). Either way the engine's weights
            follow the trainer's after every optimizer step.
        n: Responses per prompt (the group size), at most 1024: a group is generated, held and
            scored at once.
        temperature: Sampling temperature for training rollouts.
        top_p: Nucleus mass.
        top_k: 0 samples from the whole vocabulary.
        max_new_tokens: Response length limit (tokens); offline responses are truncated to it too.
        hybrid: ``off``, ``always`` (every record with ``offline_output`` gets ``offline_k`` offline
            responses in its group) or ``below_threshold`` (only when the online responses' mean
            accuracy is below ``hybrid_threshold``; otherwise the group is completed online).
        offline_k: Offline responses per hybrid group (the rest, n - k, are generated).
        hybrid_threshold: Accuracy threshold of the ``below_threshold`` mode.
        val_temperature: Sampling temperature for validation (0 = greedy).
        offline_shaping: Off-policy correction for offline responses: 0 keeps the reference's
            behaviour (old log-probs from the current policy, plain clipped loss); a value gamma > 0
            trains offline tokens with LUFFY's policy shaping ``-A * p / (p + gamma)`` (e.g. 0.1),
            which strengthens the gradient of tokens the policy finds unlikely.
        mode: ``sync`` (each step samples with the weights it then updates), ``one_step_off``
            (the next step's rollouts are generated during this step's update, with the weights
            from before it) or ``async`` (a rollout thread keeps ``max_staleness`` batches in
            flight, each sampled on the newest weights pushed when it starts). Either way the
            engine keeps its own copy of the weights, loaded between batches.
        max_staleness: At most how many updates a trained sample's weights may lag the weights
            it updates. ``one_step_off``: 1 overlaps, 0 waits for fresh weights (``sync``'s
            result). ``async``: k >= 0 batches in flight (0: ``sync``'s result). ``None``: 1;
            ``sync`` takes none.
        placement: ``colocated`` (the engine in the trainer's process) or ``separate`` (the HF
            engine in a process of its own, ``rollout/remote.py``: its own CPU threads, half of the
            trainer's, or a GPU the trainer's ranks do not use; prompts, responses and the
            weights after each update travel as safetensors bytes). One process for now.
        on_stale: ``async``: ``wait`` (a batch starts only when its weights will be within the
            bound, so none is ever too stale) or ``drop`` (one more batch in flight, so the
            engine never waits; a batch staler than ``max_staleness`` is dropped, its prompts
            drawn again later, and counted in ``rollout/dropped_stale``).
    """

    SECTION: ClassVar[str] = "rollout"

    max_new_tokens: int = TRAIN_MAX_NEW_TOKENS
    engine: str = "hf"
    n: int = 8
    hybrid: str = "off"
    offline_k: int = 1
    hybrid_threshold: float = 0.5
    val_temperature: float = 0.0
    offline_shaping: float = 0.0
    mode: str = "sync"
    max_staleness: int | None = None
    on_stale: str = "wait"
    placement: str = "colocated"
    vllm: VLLMConfig = field(default_factory=VLLMConfig)

    def __post_init__(self) -> None:
        # YAML reads a bare `off` as the boolean false; accept it as the mode it was meant to be
        if str(self.hybrid).lower() in ("false", "no", "0", "none"):
            self.hybrid = "off"
        one_of("rollout.hybrid", self.hybrid, ("off", "always", "below_threshold"))
        one_of("rollout.engine", self.engine, ENGINES)
        require(
            isinstance(self.temperature, (int, float)) and 0 < self.temperature < float("inf"),
            "rollout.temperature",
            "must be > 0 for training rollouts (use rollout.val_temperature=0 for greedy)",
            self.temperature,
        )
        self.check_sampling()
        whole_number("rollout.n", self.n, 1)
        require(
            self.n <= MAX_GROUP_SIZE,
            "rollout.n",
            f"must be <= {MAX_GROUP_SIZE}: every group of a step is generated, held and scored at once "
            "(published group sizes are 4 to 64)",
            self.n,
        )
        in_range("rollout.offline_k", self.offline_k, 0, self.n)
        in_range("rollout.hybrid_threshold", self.hybrid_threshold, 0, 1)
        non_negative("rollout.val_temperature", self.val_temperature)
        non_negative("rollout.offline_shaping", self.offline_shaping)
        one_of("rollout.mode", self.mode, ROLLOUT_MODES)
        one_of("rollout.on_stale", self.on_stale, ("wait", "drop"))
        one_of("rollout.placement", self.placement, ("colocated", "separate"))
        require(
            self.placement == "colocated" or self.engine == "hf",
            "rollout.placement",
            "separate runs the HF engine in its own process; vLLM runs its own worker processes "
            "with rollout.vllm.in_process=false",
            self.placement,
        )
        if self.mode == "sync":
            require(
                not self.max_staleness,
                "rollout.max_staleness",
                "applies to rollout.mode=one_step_off or async (sync samples with the weights it updates)",
                self.max_staleness,
            )
        elif self.max_staleness is None:
            self.max_staleness = 1
        elif self.mode == "one_step_off":
            in_range("rollout.max_staleness", self.max_staleness, 0, 1)
        else:
            require(
                isinstance(self.max_staleness, int) and 0 <= self.max_staleness <= MAX_STALENESS,
                "rollout.max_staleness",
                f"must be a whole number in [0, {MAX_STALENESS}] (batches in flight)",
                self.max_staleness,
            )
        require(
            self.on_stale == "wait" or self.mode == "async",
            "rollout.on_stale",
            "drop applies to rollout.mode=async",
            self.on_stale,
        )

    def validation_sampling(self) -> SamplingConfig:
        """What validation samples with: these settings at ``val_temperature`` (greedy by default).
        ``eval --data FILE config=run.yaml`` answers with it too, so it reproduces validation."""
        return self.sampling(temperature=self.val_temperature, return_logprobs=False)

    @property
    def overlaps(self) -> bool:
        """Rollouts are generated during the update (``one_step_off`` / ``async``, staleness > 0)."""
        return self.mode != "sync" and bool(self.max_staleness)

    @property
    def depth(self) -> int:
        """Batches kept in flight when rollouts overlap: the bound, plus one that ``drop`` may drop."""
        return (self.max_staleness or 0) + (self.on_stale == "drop")
