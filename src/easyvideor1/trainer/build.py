"""Start-up: the run config checked, then the components, the prompts and the step settings built.

The order is the one random streams depend on: the seed, the policy (LoRA initialises from the
global generator), then a per-rank reseed, then everything else (none of which draws). The hooks
on the models are attached as before: dummy vision passes, the feature cache, then the engine.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random

import torch

from .. import threads
from ..data.dataset import RecordDataset
from ..data.prompt import check_renders
from ..errors import ConfigError
from ..models.logprobs import Packing, PolicyForward
from ..models.vision import DummyVisionPass
from ..models.vision_cache import VisionFeatureCache
from ..rollout.engines import make_rollout_engine
from ..tools.base import tool_specs
from ..tools.session import ToolSession
from .distributed import DistState, init_distributed
from .handoff import EngineHandoff
from .metrics import MetricsLogger
from .policy import build_policy
from .precision import DTYPES, compute_dtype
from .preflight import preflight
from .resume import check_model_first
from .skipping import SkipLog
from .state import Components, DataSkips, StepSettings, TrainData
from .teacher import build_teacher
from .update import UpdateSettings

log = logging.getLogger(__name__)


def start(cfg) -> DistState:
    """Join the process group and check what the run needs before anything is loaded (``cfg`` is
    read, never changed: the model's family is named by :func:`~easyvideor1.resolve.resolve_config`)."""
    tc = cfg.trainer
    # each rank of a node chooses its share of the node's CPUs (torchrun: LOCAL_WORLD_SIZE ranks)
    threads.apply(processes=int(os.environ.get("LOCAL_WORLD_SIZE", "1")), explicit=cfg.cpu.threads)
    dist = init_distributed(cfg.distributed)
    if tc.prompts_per_step % dist.data_world or tc.mini_batch_prompts % dist.data_world:
        what = "data-parallel groups" if dist.sp_size > 1 else "ranks"
        raise ConfigError(
            f"trainer.prompts_per_step ({tc.prompts_per_step}) and trainer.mini_batch_prompts "
            f"({tc.mini_batch_prompts}) must be multiples of the number of {what} ({dist.data_world})"
        )
    if dist.sp_size > 1:
        check_sequence_parallel(cfg, dist)
    if not cfg.model.path:
        raise ConfigError("model.path is not set: give a Hugging Face Qwen-VL checkpoint directory")
    if not cfg.data.train_files:
        raise ConfigError("data.train_files is empty: give at least one training data file")
    check_renders(cfg.data.prompt_template, cfg.data.train_files)
    check_model_first(cfg)
    if cfg.tools.enabled:
        check_episodes(cfg)
    if cfg.rollout.overlaps:
        check_overlap(cfg, dist)
    if cfg.rollout.engine == "vllm":
        engine_dtype, compute = cfg.rollout.vllm.dtype, compute_dtype(cfg)
        if engine_dtype != "auto" and DTYPES[engine_dtype] != compute:
            log.warning(
                "rollout.vllm.dtype=%s while the trainer computes in %s: rollout/logprob_gap_* then "
                "measures the precision gap too (set distributed.param_dtype=%s to compare like with like)",
                engine_dtype,
                str(compute).removeprefix("torch."),
                engine_dtype,
            )
        if dist.enabled:
            check_engine_per_rank(cfg)
    if cfg.rollout.placement == "separate" and dist.enabled:
        raise ConfigError(
            "rollout.placement=separate runs in one process for now (under torchrun each rank would "
            "need an engine process and a device of its own): use rollout.placement=colocated"
        )
    return dist


def check_sequence_parallel(cfg, dist: DistState) -> None:
    """``distributed.sequence_parallel_size``: what cannot be split yet, refused with the key.
    (The model's head count and family are checked when it loads, ``models/sequence_parallel.py``.)"""
    k = cfg.distributed.sequence_parallel_size
    if cfg.rollout.mode != "sync":
        raise ConfigError(
            f"distributed.sequence_parallel_size={k} runs with rollout.mode=sync only for now "
            f"(got rollout.mode={cfg.rollout.mode})"
        )


def check_overlap(cfg, dist: DistState) -> None:
    """``rollout.mode`` one_step_off / async: what cannot generate during the update yet, refused
    with the key to change."""
    mode = cfg.rollout.mode
    if cfg.rollout.engine == "vllm" and cfg.rollout.vllm.sleep_between_phases:
        raise ConfigError(
            f"rollout.mode={mode} generates during the update: rollout.vllm.sleep_between_phases "
            "must be false"
        )


def check_engine_per_rank(cfg) -> None:
    """Under torchrun each rank runs one vLLM engine in its own process, on its own device (vLLM's
    external launcher follows ``LOCAL_RANK``), sampling its own prompts: what that cannot serve is
    refused with the key to change."""
    v = cfg.rollout.vllm
    if v.tensor_parallel_size > 1:
        raise ConfigError(
            f"rollout.vllm.tensor_parallel_size={v.tensor_parallel_size} under torchrun: vLLM's external "
            "launcher runs a tensor-parallel group as one engine fed the same prompts on every rank, while "
            "each rank here samples its own; use 1 (one engine per rank: an 8B model fits one GPU)"
        )
    if not v.in_process:
        raise ConfigError(
            "rollout.vllm.in_process=false under torchrun: vLLM's worker process takes device 0 on every "
            "rank; use rollout.vllm.in_process=true (the engine then follows LOCAL_RANK)"
        )


def check_episodes(cfg) -> None:
    """Training with tools (episodes): an unknown tool name fails here, before any model loads."""
    tool_specs(cfg.tools)


def build_components(cfg, dist: DistState) -> Components:
    """Seed, load the policy (and its reference and rollout copies), and build the engine, the
    optimizer and schedule, the KL controller and the loggers."""
    tc = cfg.trainer
    torch.manual_seed(tc.seed)
    random.seed(tc.seed)
    # a reference model serves the KL and a self-teacher that is the reference
    distill = cfg.algorithm.distill
    reference = cfg.algorithm.kl.enabled or (
        distill.teacher == "self" and distill.self_teacher == "reference"
    )
    policy = build_policy(cfg, dist, reference, moves=bool(tc.sft_warmup_steps or distill.sync_steps))
    model, ref_model = policy.model, policy.ref_model
    if dist.enabled:
        # independent sampling per share of the batch; the ranks of a sequence-parallel group share
        # this generator (their rollouts draw from streams of their own: split_over_group)
        torch.manual_seed(tc.seed + 1_000_003 * dist.data_rank)
    dummy = DummyVisionPass(model)
    # under FSDP the reference forward is a collective too; alone, it needs no dummy passes
    ref_dummy = DummyVisionPass(ref_model) if ref_model is not None and dist.enabled else None
    # a frozen tower's features are computed once per step and reused by every forward
    vision_cache = VisionFeatureCache([model, ref_model]) if cfg.model.freeze_vision_tower else None
    # the engine generates with its own copy when there is one, kept equal to the trainer's
    if policy.rollout_model is not None:
        engine = make_rollout_engine(cfg, policy.processor, policy.rollout_model, dist, owns_weights=True)
    else:
        engine = make_rollout_engine(cfg, policy.processor, model, dist)
    # every log-prob pass (old, reference, update) at the rollouts' temperature, without the ids
    # generation never samples
    packing = Packing(tc.padding_free, tc.max_tokens_per_micro_batch, tc.micro_batch_size, tc.shared_prefix)
    forward = PolicyForward(model, dummy, vision_cache, engine.banned, cfg.rollout.temperature, packing)
    sleep = cfg.rollout.engine == "vllm" and cfg.rollout.vllm.sleep_between_phases
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=tc.lr, betas=tuple(tc.betas), weight_decay=tc.weight_decay)
    updates_per_step = tc.ppo_epochs * (tc.prompts_per_step // tc.mini_batch_prompts)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(tc.warmup_steps, tc.max_steps * updates_per_step, tc.lr_schedule)
    )
    loggers = tc.loggers if dist.is_main else []  # rank 0 reports; the others stay quiet
    # episodes: the tools and the frames they serve, shared by a step's episodes (its loader is the
    # training set's, set when the data is loaded)
    tools = ToolSession(cfg.tools, cfg.data.model_family) if cfg.tools.enabled else None
    teacher = build_teacher(cfg, dist, policy.processor, forward)
    return Components(
        **{f.name: getattr(policy, f.name) for f in dataclasses.fields(policy)},
        dist=dist,
        forward=forward,
        ref_forward=None if ref_model is None else forward.of(ref_model, ref_dummy),
        engine=engine,
        handoff=EngineHandoff(engine, model, sleep=sleep, deferred=cfg.rollout.overlaps),
        optimizer=optimizer,
        scheduler=scheduler,
        kl_ctl=cfg.algorithm.make_kl_controller(),
        logger=MetricsLogger(tc.output_dir, loggers, dataclasses.asdict(cfg), tc.max_steps),
        skip_log=SkipLog(tc.output_dir),
        tools=tools,
        teacher=teacher,
    )


def lr_lambda(warmup: int, total: int, schedule: str):
    """The learning-rate factor at optimizer step ``step``: linear warm-up, then 1 or a cosine."""

    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "cosine" and total > warmup:
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return f


def load_data(cfg, parts: Components) -> tuple[TrainData, DataSkips]:
    """The training and validation records, checked (``preflight.py``): the usable prompts, and
    the records left out (listed in ``skipped_records.jsonl`` by rank 0)."""
    tc = cfg.trainer
    train_set = RecordDataset.from_files(cfg.data.train_files, cfg.data)
    val_set = (
        RecordDataset.from_files(cfg.data.val_files, cfg.data, train_set.loader)
        if cfg.data.val_files and tc.val_size > 0
        else None
    )
    if parts.tools is not None:  # every prompt lists the tools (training, warm-up, validation)
        parts.tools.loader = train_set.loader
        for dataset in (train_set, val_set):
            if dataset is not None:
                dataset.tools = parts.tools.schemas()
    for split, files, dataset in (
        ("train", cfg.data.train_files, train_set),
        ("val", cfg.data.val_files, val_set),
    ):
        read = set() if dataset is None else {*dataset.data_files, *(f for f, _ in dataset.unreadable)}
        empty = [f for f in files if dataset is not None and f not in read]
        if empty:  # else "no prompt fits data.max_prompt_length", which sends one looking elsewhere
            raise ConfigError(f"{split} file {empty[0]} has no records (data.{split}_files)")
    if parts.dist.is_main:
        parts.skip_log.start()
    skips = DataSkips()

    def check(dataset: RecordDataset | None, split: str, max_count: int | None = None):
        keep, lengths, skipped = preflight(
            dataset, split, cfg, parts.processor, parts.dist, parts.logger.write, max_count
        )
        skips.skipped_preflight += len(skipped)
        if parts.dist.is_main:
            parts.skip_log.write(skipped)
        return keep, lengths

    train_idx, prompt_tokens = check(train_set, "train")
    val_idx = check(val_set, "val", max_count=tc.val_size)[0] if val_set else []
    return TrainData(train_set, val_set, train_idx, val_idx, prompt_tokens), skips


def step_settings(cfg) -> StepSettings:
    """Sampling and update settings from the config: every sampling key of ``rollout`` (its
    :meth:`~.sampling.SamplingConfig.sampling`) reaches the engine, in training and validation."""
    r, alg, tc = cfg.rollout, cfg.algorithm, cfg.trainer
    return StepSettings(
        # vLLM returns sampled-token log-probs for free: logged against the trainer's (mismatch
        # check); the HF engine keeps them where they can differ (another copy, stale weights),
        # or when rollout.return_logprobs asks for the check
        sampling=r.sampling(
            return_logprobs=r.return_logprobs
            or r.engine == "vllm"
            or cfg.algorithm.rollout_correction != "none"
            or r.mode != "sync"
            or r.placement == "separate",
        ),
        val_sampling=r.validation_sampling(),
        update=UpdateSettings(
            policy_loss=alg.policy_loss,
            loss_options=alg.policy_loss_options(),
            loss_agg_mode=alg.loss_agg_mode,
            norm_length=alg.loss_norm_length or r.max_new_tokens,
            kl_in_loss=alg.kl.enabled and alg.kl.apply_as == "loss",
            kl_kind=alg.kl.type,
            max_grad_norm=tc.max_grad_norm,
            offline_shaping=r.offline_shaping,
            distill_loss=alg.distill.objective if alg.distill.kind == "loss" else "",
            distill_coef=alg.distill.coef,
        ),
        kl_reference=alg.kl.enabled,
    )
