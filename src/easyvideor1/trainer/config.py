"""Configuration of the model, the training loop and data parallelism (sections of the run config).

The rollout sections live beside the engines, in ``rollout/config.py`` (re-exported here for old imports).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..data.probe import PROBES
from ..rollout.config import ENGINES, RolloutConfig, VLLMConfig  # noqa: F401  (re-exported)
from ..validation import at_least, in_range, non_negative, one_of, positive, require

LOGGERS = ("console", "jsonl", "tensorboard", "wandb")
# transformers' attention kernels a policy may run with (model.attn_implementation)
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
SHARED_PREFIX_MODES = ("auto", "on", "off")  # models.logprobs.Packing.shares reads them


@dataclass
class LoraConfig:
    """LoRA adapters on the policy (``model.lora``), with ``peft``; ``rank: 0`` trains every weight.

    With a rank, the base weights are frozen and only the adapters train (the optimizer holds
    state for them alone); the KL reference is the same model with the adapter disabled (no
    second copy of the weights). See docs/concepts/lora.md.

    Parameters:
        rank: Adapter rank r (0 = no LoRA).
        alpha: Scaling numerator: the update is ``alpha / rank * B @ A``. With AdamW, raising it
            raises the adapters' effective learning rate much like ``trainer.lr`` does.
        dropout: Dropout on the adapters' input, in [0, 1). Non-zero makes log-probs in train mode
            random, which RL's ratios do not want: 0 by default.
        target_modules: Module names to adapt, PEFT's way (an entry matches a module whose name is
            it or ends with ``.<entry>``, e.g. ``q_proj`` or ``model.language_model.layers.0.mlp.up_proj``);
            every entry must match a linear layer. Empty (default): every linear layer of the
            language model (attention and MLP projections, linear-attention projections; not
            ``lm_head``, the embeddings or MoE routers).
        vision: With the default targets, adapt the vision tower's linear layers too (blocks and
            merger). Needs ``model.freeze_vision_tower: false``; otherwise the tower stays frozen.
    """

    rank: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=list)
    vision: bool = False

    def __post_init__(self) -> None:
        require(
            isinstance(self.rank, int) and not isinstance(self.rank, bool) and self.rank >= 0,
            "model.lora.rank",
            "must be a whole number >= 0 (0: no LoRA)",
            self.rank,
        )
        positive("model.lora.alpha", self.alpha)
        in_range("model.lora.dropout", self.dropout, 0, 1)
        require(self.dropout < 1, "model.lora.dropout", "must be < 1", self.dropout)
        bad = [t for t in self.target_modules if not isinstance(t, str) or not t.strip()]
        require(not bad, "model.lora.target_modules", "entries must be non-empty module names", bad)
        require(isinstance(self.vision, bool), "model.lora.vision", "must be true or false", self.vision)

    @property
    def enabled(self) -> bool:
        return self.rank > 0


@dataclass
class ModelConfig:
    """The policy model.

    Parameters:
        path: A Hugging Face Qwen2-VL / Qwen2.5-VL / Qwen3-VL checkpoint directory (loaded with
            ``AutoModelForImageTextToText`` and ``AutoProcessor``). Build a tiny one offline with
            ``easyvideor1 make-tiny-model``.
        dtype: The master weights' dtype: trainable parameters and optimizer state (``float32``;
            compute in ``bfloat16`` with ``distributed.param_dtype``). ``bfloat16`` masters are
            refused when the learning rate is too small to move them (:func:`~easyvideor1.
            trainer.precision.check_master_precision`) unless ``allow_low_precision_masters``.
        allow_low_precision_masters: Run with bf16/fp16 master weights even when most of the
            trainable weights cannot move by one step of ``trainer.lr`` (experiments only).
        gradient_checkpointing: Recompute activations in the backward pass (less memory, more time).
        freeze_vision_tower: Train only the language model and the merger.
        lora: LoRA adapters instead of full fine-tuning (:class:`LoraConfig`; ``rank: 0`` = off).
        attn_implementation: The attention kernel transformers runs, in the language model and the
            vision tower alike: ``sdpa`` (default: PyTorch's fused attention, any device),
            ``eager`` (plain matmuls, for debugging) or ``flash_attention_2`` (GPUs, needs the
            ``flash_attn`` package, checked when the model loads: ``pip install flash-attn
            --no-build-isolation``). With ``trainer.padding_free`` a packed row reaches
            flash-attention as its varlen sequences (no mask in memory, no padded tokens), while
            sdpa has to build a block-diagonal mask for it. The KL reference and the trainer's HF
            rollout engines follow the policy's setting.
    """

    path: str = ""
    dtype: str = "float32"
    allow_low_precision_masters: bool = False
    gradient_checkpointing: bool = False
    freeze_vision_tower: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)
    attn_implementation: str = "sdpa"

    def __post_init__(self) -> None:
        one_of("model.dtype", self.dtype, ("float32", "fp32", "bfloat16", "bf16"))
        one_of("model.attn_implementation", self.attn_implementation, ATTENTION_IMPLEMENTATIONS)
        require(
            not (self.lora.enabled and self.lora.vision and self.freeze_vision_tower),
            "model.lora.vision",
            "adapts the vision tower, which model.freeze_vision_tower=true freezes: set one of them false",
            self.lora.vision,
        )


@dataclass
class TrainingEvalConfig:
    """Benchmark evaluation of the policy while it trains (``trainer.eval.*``; off by default).

    Attributes:
        every: Evaluate the weights of every k-th step, and of the last step (0 = off).
        benchmarks: Benchmark registry names (as ``eval --benchmarks``); empty: ``eval.benchmarks``.
        data: Records files evaluated as benchmarks of their own (as ``eval --data``); empty:
            ``eval.data``. The other evaluation settings (annotations, frames, sampling, the
            judge) are the run's ``eval``, ``data`` and ``reward`` sections.
        engine: ``hf`` or ``vllm`` for the evaluation process (empty: ``eval.engine``).
        max_samples: Evaluate only the first N samples of each benchmark (0: all).
        threads: Intra-op CPU threads of the evaluation process (on a CPU machine it shares the
            cores with training).
        nice: CPU niceness of the evaluation process (training keeps the larger CPU share).
        devices: ``CUDA_VISIBLE_DEVICES`` of the evaluation process on a GPU machine (e.g. ``"7"``:
            its own GPU); empty: inherited.
        keep_weights: Keep ``eval/step_<N>/model`` after its evaluation finished (default: removed).
    """

    every: int = 0
    benchmarks: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    engine: str = ""
    max_samples: int = 0
    threads: int = 1
    nice: int = 10
    devices: str = ""
    keep_weights: bool = False

    def __post_init__(self) -> None:
        for key in ("every", "max_samples", "nice"):
            non_negative(f"trainer.eval.{key}", getattr(self, key))
        require(
            isinstance(self.threads, int) and self.threads >= 1,
            "trainer.eval.threads",
            "must be >= 1",
            self.threads,
        )
        if self.engine:
            one_of("trainer.eval.engine", self.engine, ENGINES)

    @property
    def enabled(self) -> bool:
        return self.every > 0


@dataclass
class TrainerConfig:
    """The training loop.

    Parameters:
        output_dir: Where checkpoints, ``metrics.jsonl``, TensorBoard logs and reports go.
        max_steps: RL steps to run.
        prompts_per_step: Prompts sampled per step (each becomes a group of ``rollout.n`` responses).
        mini_batch_prompts: Prompts per optimizer step within a rollout batch (``ppo_epochs`` passes).
        micro_batch_size: Sequences per forward/backward (gradient accumulation; the loss is
            weighted so that the result does not depend on it).
        ppo_epochs: Passes over each rollout batch.
        padding_free: Run each micro-batch's sequences packed into one row (per-sequence M-RoPE
            positions and attention boundaries) instead of padded to the longest; same log-probs
            (fp32, within 1e-5). Hybrid linear-attention families (Qwen3.5) pack as blocks of
            the shared-prefix layout, one sequence each (their DeltaNet layers run per sequence).
        shared_prefix: ``auto`` (default), ``on`` or ``off``: lay each micro-batch out with every
            prompt once and the responses that answer it after it, each response attending to the
            prompt and to itself (``models/shared_prefix.py``). Every pass (old and reference
            log-probs, the update's forward and backward) then runs the language model over a
            group's prompt once instead of once per response: for a video prompt that is most of
            the tokens. The log-probs and gradients are those of the unshared forward (fp32,
            within 1e-5). ``auto``: for every micro-batch that holds two or more responses to one
            prompt; ``on``: for every micro-batch (a packed row even without repeats); ``off``:
            never. ``perf/prefix_tokens_saved`` logs the share of language-model tokens it saves.
        max_tokens_per_micro_batch: When > 0, micro-batches are formed by this token budget (prompt
            tokens, media placeholders included, plus response tokens; padded micro-batches count
            rows times the widest row) instead of ``micro_batch_size`` sequences; a longer sequence
            runs alone. The loss and gradient do not change.
        lr: AdamW learning rate. weight_decay, betas: AdamW settings.
        warmup_steps: Linear learning-rate warm-up (optimizer steps). lr_schedule: ``constant`` or ``cosine``.
        max_grad_norm: Gradient clipping; a non-finite norm skips the optimizer step (logged).
        seed: Seeds sampling, data order and initialisation.
        sft_warmup_steps: Supervised steps on the records' ``offline_output`` before RL (0 = none).
        sft_lr: Learning rate of the warm-up. sft_batch_size: Prompts per warm-up step.
        val_every: Validate every k steps (0 = only before and after). val_size: Validation prompts
            (0 = no validation).
        save_every: Checkpoint every k steps (0 = only at the end). keep_last: Checkpoints kept.
        resume: ``auto`` (continue from the newest checkpoint in output_dir if any), ``never``, or a path.
        loggers: Any of ``console``, ``jsonl``, ``tensorboard``, ``wandb``.
        export_merged: With ``model.lora``, every checkpoint also holds ``merged/``: the adapter
            merged into the base weights, a plain Hugging Face model directory (serve or evaluate it
            without peft). Without LoRA the checkpoint is such a directory already.
        export_dtype: The dtype of a checkpoint's Hugging Face weights: null (default) writes the
            master weights' dtype (``model.dtype``); ``bfloat16`` halves them for serving. The
            sharded training state that resumes a run is always exact.
        video_probe_every: Does the policy look at the video? Every k steps, and at the first
            (before and after the warm-up) and final validation, validation also runs with each
            probe of ``video_probe`` applied to the validation prompts that have a video (0 = off;
            a probe step validates even when ``val_every`` would not). Logs
            ``val/accuracy_blank_video``, ``val/video_gap`` (real minus blank accuracy on the same
            prompts) and their ``val/<task>/...`` breakdowns; ``shuffle`` logs
            ``val/accuracy_shuffled_video`` and ``val/video_gap_shuffled``. Needs validation
            (``data.val_files``, ``val_size`` > 0).
        eval: Benchmark evaluation of the policy while it trains, in a background process
            (``trainer.eval.*``, ``background_eval.py``): ``eval/<benchmark>/<metric>`` logged at
            the step evaluated, results under ``output_dir/eval/step_<N>/``.
        video_probe: Probes run at those steps (``data/probe.py``): ``blank`` (every frame mid-grey)
            and/or ``shuffle`` (frames in a fixed random order); shapes, token counts and timestamps
            stay the real ones, images and text are not touched.
    """

    output_dir: str = "runs/train"
    max_steps: int = 100
    prompts_per_step: int = 8
    mini_batch_prompts: int = 8
    micro_batch_size: int = 16
    ppo_epochs: int = 1
    padding_free: bool = False
    shared_prefix: str = "auto"
    max_tokens_per_micro_batch: int = 0
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 0
    lr_schedule: str = "constant"
    max_grad_norm: float = 1.0
    seed: int = 0
    sft_warmup_steps: int = 0
    sft_lr: float = 1e-5
    sft_batch_size: int = 32
    val_every: int = 0
    val_size: int = 64
    save_every: int = 0
    keep_last: int = 2
    resume: str = "auto"
    loggers: list[str] = field(default_factory=lambda: ["console", "jsonl", "tensorboard"])
    export_merged: bool = False
    export_dtype: str | None = None
    video_probe_every: int = 0
    video_probe: list[str] = field(default_factory=lambda: ["blank"])
    eval: TrainingEvalConfig = field(default_factory=TrainingEvalConfig)

    def __post_init__(self) -> None:
        if isinstance(self.eval, dict):
            self.eval = TrainingEvalConfig(**self.eval)
        require(
            isinstance(self.export_merged, bool),
            "trainer.export_merged",
            "must be true or false",
            self.export_merged,
        )
        for key in ("max_steps", "prompts_per_step", "mini_batch_prompts", "micro_batch_size", "ppo_epochs"):
            at_least(f"trainer.{key}", getattr(self, key), 1)
        at_least("trainer.sft_batch_size", self.sft_batch_size, 1)
        require(
            isinstance(self.padding_free, bool),
            "trainer.padding_free",
            "must be true or false",
            self.padding_free,
        )
        if str(self.shared_prefix).lower() in ("true", "false"):  # YAML reads a bare on/off as a bool
            self.shared_prefix = "on" if str(self.shared_prefix).lower() == "true" else "off"
        one_of("trainer.shared_prefix", self.shared_prefix, SHARED_PREFIX_MODES)
        n = self.max_tokens_per_micro_batch
        require(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0,
            "trainer.max_tokens_per_micro_batch",
            "must be a whole number of tokens >= 0 (0: micro-batches of trainer.micro_batch_size sequences)",
            n,
        )
        for key in ("warmup_steps", "sft_warmup_steps", "val_every", "val_size", "save_every", "keep_last"):
            non_negative(f"trainer.{key}", getattr(self, key))
        for key in ("lr", "sft_lr", "max_grad_norm"):
            positive(f"trainer.{key}", getattr(self, key))
        non_negative("trainer.weight_decay", self.weight_decay)
        require(len(self.betas) == 2, "trainer.betas", "must be two numbers [beta1, beta2]", self.betas)
        for i, beta in enumerate(self.betas):
            in_range(f"trainer.betas[{i}]", beta, 0, 1)
            require(beta < 1, f"trainer.betas[{i}]", "must be < 1", beta)
        require(
            self.prompts_per_step % self.mini_batch_prompts == 0,
            "trainer.prompts_per_step",
            f"must be a multiple of trainer.mini_batch_prompts ({self.mini_batch_prompts})",
            self.prompts_per_step,
        )
        one_of("trainer.lr_schedule", self.lr_schedule, ("constant", "cosine"))
        require(
            bool(str(self.resume).strip()), "trainer.resume", "must be auto, never or a path", self.resume
        )
        unknown = [name for name in self.loggers if name not in LOGGERS]
        require(not unknown, "trainer.loggers", f"entries must be among {', '.join(LOGGERS)}", unknown)
        if self.export_dtype is not None:
            one_of("trainer.export_dtype", self.export_dtype, ("float32", "bfloat16", "float16"))
        n = self.video_probe_every
        require(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0,
            "trainer.video_probe_every",
            "must be a whole number of steps >= 0 (0: no video probe)",
            n,
        )
        probes = self.video_probe
        require(
            isinstance(probes, list) and bool(probes) and all(p in PROBES for p in probes),
            "trainer.video_probe",
            f"must be a non-empty list of {', '.join(PROBES)}",
            probes,
        )
        require(len(set(probes)) == len(probes), "trainer.video_probe", "lists a probe twice", probes)


@dataclass
class DemoConfig:
    """The embedded demo's assets, created on demand so ``configs/demo.yaml`` trains directly.

    Parameters:
        prepare: When true, ``train`` writes the synthetic task set to ``data_dir`` and a tiny
            Qwen3-VL to ``model.path`` if they are missing, and points ``data.train_files`` /
            ``data.val_files`` at them when those are empty.
        data_dir: Where the synthetic videos and ``train.jsonl`` / ``val.jsonl`` go.
        n_train: Training videos. n_val: Held-out videos.
        mixed: Make every fourth record an image and every fourth a text-only question, so batches
            (and, under torchrun, ranks) mix modalities.
        task: ``colour`` (the colour of the moving square, ``configs/demo.yaml``) or ``window``
            (its colour during a one-second window the first view never shows, for the video tools:
            ``configs/demo_tools.yaml``).
        model_layers: Decoder layers of the tiny model it builds.
    """

    prepare: bool = False
    data_dir: str = "runs/demo/data"
    n_train: int = 256
    n_val: int = 64
    mixed: bool = False
    task: str = "colour"
    model_layers: int = 2

    def __post_init__(self) -> None:
        at_least("demo.n_train", self.n_train, 1)
        at_least("demo.model_layers", self.model_layers, 1)
        at_least("demo.n_val", self.n_val, 1)
        one_of("demo.task", self.task, DEMO_TASKS)
        require(
            not (self.mixed and self.task == "window"), "demo.mixed", "has no window task variant", self.mixed
        )


DEMO_TASKS = ("colour", "window")

# dtype names FSDP mixed precision accepts (trainer/distributed.py maps them to torch dtypes)
DISTRIBUTED_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class DistributedConfig:
    """Data parallelism with FSDP2 (used when the run is launched with ``torchrun``).

    Parameters:
        backend: ``auto`` (NCCL when CUDA is available, else gloo), ``nccl`` or ``gloo``.
        param_dtype: The compute dtype: parameters are all-gathered (FSDP2) and computed in it
            (``bfloat16`` on GPUs) while the master weights and the optimizer state stay in
            ``model.dtype`` (``float32``). In one process without FSDP the forwards run under
            ``torch.autocast`` in it. The KL reference model and an HF rollout copy are held in
            it. ``null`` computes in ``model.dtype``.
        reduce_dtype: Gradient reduce-scatter dtype (``float32`` is safest); honoured with or
            without ``param_dtype``.
        cpu_offload: Keep sharded parameters, gradients and optimizer states in CPU memory
            (GPU runs only; slower, for models that do not fit).
        reshard_after_forward: Free the gathered parameters after each layer's forward (ZeRO-3);
            false keeps them until the backward (ZeRO-2 style, more memory, fewer all-gathers).
        balance_tokens: Assign each step's prompts to ranks so that their prompt-token counts are
            balanced (greedy, longest first) instead of in contiguous blocks.
        timeout_minutes: Collective timeout: a rank that stops answering fails the run after this.
        group_with_one_rank: Under ``torchrun --nproc-per-node 1``, still join the process group
            and shard with FSDP2 (a one-rank mesh) instead of running as a plain process: the only
            way to exercise the NCCL/FSDP2 path on a single GPU (``tools/gpu_check.sh`` uses it).
            Costs a second full model copy for HF rollouts, as any FSDP run does.
        sequence_parallel_size: Ranks that share each sample's sequence (Ulysses sequence
            parallelism, ``models/sequence_parallel.py``): every k consecutive ranks hold the same
            samples, and inside the language model each keeps a k-th of the sequence, attention
            exchanging sequence shards for head shards. 1 = off. The ranks form world / k
            data-parallel groups of k; FSDP2 shards over all of them; the vision tower's frames
            are split over the group too. Qwen3.5's gated-DeltaNet layers run head-parallel.
            Needs the world size and the head counts (attention; DeltaNet key and value heads)
            divisible by k, and ``rollout.mode=sync``.
    """

    backend: str = "auto"
    param_dtype: str | None = None
    reduce_dtype: str = "float32"
    cpu_offload: bool = False
    reshard_after_forward: bool = True
    balance_tokens: bool = False
    timeout_minutes: float = 30.0
    group_with_one_rank: bool = False
    sequence_parallel_size: int = 1

    def __post_init__(self) -> None:
        one_of("distributed.backend", self.backend, ("auto", "nccl", "gloo"))
        at_least("distributed.sequence_parallel_size", self.sequence_parallel_size, 1)
        if self.param_dtype is not None:
            one_of("distributed.param_dtype", self.param_dtype, DISTRIBUTED_DTYPES)
        one_of("distributed.reduce_dtype", self.reduce_dtype, DISTRIBUTED_DTYPES)
        positive("distributed.timeout_minutes", self.timeout_minutes)
