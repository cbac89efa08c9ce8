"""The RL loop: batch -> rollout -> rewards -> advantages -> old/ref log-probs -> update -> metrics.

``Trainer(cfg).train()`` runs ``trainer.max_steps`` steps from a :class:`~easyvideor1.config.RunConfig`,
validating, checkpointing and resuming as configured.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import random
import time

import torch

from ..algorithms._registry import normalize_name
from ..algorithms.advantages import compute_advantages
from ..algorithms.filtering import filter_groups, overlong_penalty
from ..algorithms.kl import kl_penalty
from ..algorithms.masked import masked_mean
from ..data.dataset import RecordDataset, encode_prompts
from ..media.cache import CacheError
from ..models.inputs import expand
from ..models.loading import load_policy
from ..models.logprobs import response_logprobs
from ..models.vision import DummyVisionPass
from ..rewards import validate_problem_types
from ..rollout.base import SamplingConfig
from ..rollout.hf import HFRolloutEngine
from .checkpoint import find_latest, load_model_weights, load_trainer_state, save_checkpoint
from .evaluate import evaluate
from .experience import Experience, collect, merge_groups, score, tokenize_offline
from .metrics import MetricsLogger, hybrid_metrics, reward_metrics
from .sampler import PromptSampler
from .update import UpdateSettings, experience_logprobs, policy_update


def _lr_lambda(warmup: int, total: int, schedule: str):
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "cosine" and total > warmup:
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return f


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        tc, self.alg = cfg.trainer, cfg.algorithm
        torch.manual_seed(tc.seed)
        random.seed(tc.seed)
        self.model, self.processor = load_policy(
            cfg.model.path, cfg.model.dtype, cfg.model.gradient_checkpointing, cfg.model.freeze_vision_tower
        )
        self.model.train()
        self.dummy = DummyVisionPass(self.model)
        self.engine = HFRolloutEngine(self.model, self.processor)
        self.train_set = RecordDataset.from_files(cfg.data.train_files, cfg.data)
        self.val_set = (
            RecordDataset.from_files(cfg.data.val_files, cfg.data, self.train_set.loader)
            if cfg.data.val_files
            else None
        )
        self.logger = MetricsLogger(tc.output_dir, tc.loggers, dataclasses.asdict(cfg), tc.max_steps)
        self.train_idx = self.preflight(self.train_set, "train")
        self.val_idx = self.preflight(self.val_set, "val", max_count=tc.val_size) if self.val_set else []
        if normalize_name(self.alg.adv_estimator) in ("gdpo", "remax") and (
            self.alg.overlong.enable or (self.alg.kl.enabled and self.alg.kl.apply_as == "reward")
        ):
            raise ValueError(
                f"algorithm.adv_estimator={self.alg.adv_estimator} works on the raw reward keys / a greedy "
                "baseline: use it without algorithm.overlong and without kl.apply_as=reward"
            )
        self.kl_ctl = self.alg.make_kl_controller()
        self.ref_model = None
        if self.alg.kl.enabled:
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
            self.ref_dummy = None
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=tc.lr, betas=tuple(tc.betas), weight_decay=tc.weight_decay
        )
        updates_per_step = tc.ppo_epochs * (tc.prompts_per_step // tc.mini_batch_prompts)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _lr_lambda(tc.warmup_steps, tc.max_steps * updates_per_step, tc.lr_schedule)
        )
        self.sampler = PromptSampler(len(self.train_idx), tc.prompts_per_step, seed=tc.seed)
        r = cfg.rollout
        self.sampling = SamplingConfig(r.temperature, r.top_p, r.top_k, r.max_new_tokens)
        self.val_sampling = SamplingConfig(r.val_temperature, r.top_p, r.top_k, r.max_new_tokens)
        self.settings = UpdateSettings(
            policy_loss=self.alg.policy_loss,
            loss_options=self.alg.policy_loss_options(),
            loss_agg_mode=self.alg.loss_agg_mode,
            norm_length=self.alg.loss_norm_length or r.max_new_tokens,
            kl_loss_coef=self.alg.kl.coef if self.alg.kl.enabled and self.alg.kl.apply_as == "loss" else 0.0,
            kl_kind=self.alg.kl.type,
            temperature=r.temperature,
            micro_batch_size=tc.micro_batch_size,
            max_grad_norm=tc.max_grad_norm,
            offline_shaping=r.offline_shaping,
        )
        self.step, self.history = 0, []

    # ---------------------------------------------------------------------------------------- checks
    def preflight(self, dataset: RecordDataset | None, split: str, max_count: int | None = None) -> list[int]:
        """Fail early on what would fail mid-run: unknown tasks, missing cache entries, overlong prompts."""
        if dataset is None:
            return []
        validate_problem_types({r.problem_type for r in dataset.records}, self.cfg.reward)
        keep, dropped = [], 0
        limit = self.cfg.data.max_prompt_length
        for start in range(0, len(dataset), 32):
            if max_count is not None and len(keep) >= max_count:
                break  # only the first `max_count` fitting prompts are used
            idx = list(range(start, min(start + 32, len(dataset))))
            samples = [dataset[i] for i in idx]
            if self.cfg.data.cache_mode == "cache_only":
                missing = [s.videos[j] for s in samples for j, e in enumerate(s.video_entries) if e is None]
                if missing:
                    raise CacheError(
                        f"{split}: {len(missing)} video(s) have no cache entry, e.g. {missing[0]} "
                        "(cache_only mode; run `easyvideor1 preprocess` with the same settings)"
                    )
            lengths = (
                encode_prompts(self.processor, samples, dataset.cfg, dataset.loader)
                .inputs["attention_mask"]
                .sum(1)
            )
            for i, n in zip(idx, lengths.tolist(), strict=True):
                if n <= limit:
                    keep.append(i)
                else:
                    dropped += 1
        keep = keep[:max_count] if max_count is not None else keep
        self.logger.write(
            f"preflight {split}: {len(keep)} prompts kept, {dropped} dropped as longer than "
            f"data.max_prompt_length={limit} tokens"
        )
        if not keep:
            raise ValueError(f"{split}: no prompt fits data.max_prompt_length={limit}")
        return keep

    # ------------------------------------------------------------------------------------- one step
    def rl_step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        exp, samples, batch, t_data = self._collect_groups(metrics)
        t_rollout = time.perf_counter()
        scores = exp.scores["overall"].clone()
        if self.alg.overlong.enable:
            pen = overlong_penalty(
                exp.mask,
                max_length=self.alg.overlong.max_length or self.sampling.max_new_tokens,
                buffer=self.alg.overlong.buffer,
                factor=self.alg.overlong.factor,
            )
            scores += pen
            metrics["reward/overlong_penalty"] = float(pen.mean())
        exp.old_logp, entropy = experience_logprobs(
            self.model,
            exp,
            self.engine.banned,
            self.dummy,
            self.sampling.temperature,
            self.cfg.trainer.micro_batch_size,
        )
        if self.ref_model is not None:
            exp.ref_logp, _ = experience_logprobs(
                self.ref_model,
                exp,
                self.engine.banned,
                None,
                self.sampling.temperature,
                self.cfg.trainer.micro_batch_size,
            )
            if self.alg.kl.apply_as == "reward":
                kl = kl_penalty(exp.old_logp, exp.ref_logp, self.alg.kl.type, exp.mask)
                scores = scores - self.kl_ctl.value * (kl * exp.mask).sum(1)
                metrics["actor/reward_kl"] = float(masked_mean(kl, exp.mask.bool()))
            mean_kl = float(
                masked_mean(
                    kl_penalty(exp.old_logp, exp.ref_logp, self.alg.kl.type, exp.mask), exp.mask.bool()
                )
            )
            self.kl_ctl.update(mean_kl, len(exp))
            self.settings.kl_loss_coef = self.kl_ctl.value if self.alg.kl.apply_as == "loss" else 0.0
            metrics["actor/kl_coef"] = self.kl_ctl.value
        t_logp = time.perf_counter()
        exp.advantages = self._advantages(exp, scores, batch, samples)
        metrics.update(hybrid_metrics(exp))
        metrics["actor/entropy_rollout"] = float(masked_mean(entropy, exp.mask.bool()))
        groups = sorted(set(exp.prompt_of))
        per_mini = self.cfg.trainer.mini_batch_prompts
        mini = []
        for _ in range(self.cfg.trainer.ppo_epochs):
            for g in range(0, len(groups), per_mini):
                chosen = set(groups[g : g + per_mini])
                mini.append([i for i, p in enumerate(exp.prompt_of) if p in chosen])
        metrics.update(
            policy_update(
                self.model,
                self.optimizer,
                self.scheduler,
                exp,
                mini,
                self.settings,
                self.engine.banned,
                self.dummy,
            )
        )
        t_end = time.perf_counter()
        tokens = int(exp.mask.sum()) + int(batch.inputs["attention_mask"].sum()) * self.cfg.rollout.n
        metrics.update(
            {
                "time/data": t_data - t0,
                "time/rollout": t_rollout - t_data,
                "time/logprobs": t_logp - t_rollout,
                "time/update": t_end - t_logp,
                "time/step": t_end - t0,
                "perf/tokens_per_s": tokens / (t_end - t0),
            }
        )
        return metrics

    def _next_samples(self):
        samples = [self.train_set[self.train_idx[i]] for i in self.sampler.next_batch()]
        return samples, encode_prompts(self.processor, samples, self.cfg.data, self.train_set.loader)

    def _rollout(self, samples, batch) -> Experience:
        return collect(
            self.engine,
            self.processor.tokenizer,
            batch,
            samples,
            self.cfg.rollout,
            self.sampling,
            self.cfg.reward,
        )

    def _collect_groups(self, metrics: dict):
        """Rollouts for one step. With DAPO dynamic sampling, groups whose rewards carry no signal
        are dropped and new prompts are drawn, round after round, until ``prompts_per_step`` groups
        are kept or ``algorithm.online_filtering.max_tries`` rounds have run."""
        t0 = time.perf_counter()
        samples, batch = self._next_samples()
        t_data = time.perf_counter() - t0
        f = self.alg.online_filtering
        exp = self._rollout(samples, batch)
        metrics.update(exp.metrics)
        metrics.update(reward_metrics(exp))  # rewards as sampled, before any filtering
        if not f.enable:
            return exp, samples, batch, t0 + t_data
        target = self.cfg.trainer.prompts_per_step
        parts, kept, rounds, dropped = [], 0, 0, 0
        while True:
            res = filter_groups(
                exp.scores, exp.prompt_of, criterion=f.criterion, low=f.low, high=f.high, key=f.key
            )
            keep = sorted({exp.prompt_of[i] for i in res.keep.nonzero().flatten().tolist()})[: target - kept]
            parts.append((exp, samples, keep))
            kept, rounds, dropped = kept + len(keep), rounds + 1, dropped + res.dropped_groups
            if kept >= target or (f.max_tries > 0 and rounds >= f.max_tries):
                break
            t = time.perf_counter()
            samples, batch = self._next_samples()
            t_data += time.perf_counter() - t
            exp = self._rollout(samples, batch)
        metrics.update(
            {
                "filter/rounds": float(rounds),
                "filter/kept_groups": float(kept),
                "filter/dropped_groups": float(dropped),
            }
        )
        if kept == 0:  # no group passed the filter: train on the last round as it is
            return exp, samples, batch, t0 + t_data
        kept_samples = [s[p] for _, s, keep in parts for p in keep]
        t = time.perf_counter()
        batch = encode_prompts(self.processor, kept_samples, self.cfg.data, self.train_set.loader)
        t_data += time.perf_counter() - t
        return merge_groups(parts, batch), kept_samples, batch, t0 + t_data

    def _advantages(self, exp: Experience, scores: torch.Tensor, batch, samples) -> torch.Tensor:
        name = normalize_name(self.alg.adv_estimator)
        opts = self.alg.advantage_options()
        if name == "gdpo":
            values = {k: exp.scores[k] for k in self.alg.gdpo_reward_keys}
        else:
            values = scores
        if name == "remax":
            greedy = self.engine.generate(
                batch, [1] * len(samples), dataclasses.replace(self.sampling, temperature=0)
            )
            base, _, _ = score(
                greedy.texts, samples, list(range(len(samples))), greedy.mask.sum(1).tolist(), self.cfg.reward
            )
            opts["baseline_scores"] = base["overall"][torch.tensor(exp.prompt_of)]
        out = compute_advantages(name, values, exp.mask, exp.prompt_of, **opts)
        return out.advantages.float()

    def sft_warmup(self) -> bool:
        """Supervised steps on the records' offline responses (a cold-start remedy for tiny models)."""
        tc = self.cfg.trainer
        with_offline = [i for i in self.train_idx if self.train_set.records[i].offline_output]
        if not tc.sft_warmup_steps or not with_offline:
            return False
        opt = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=tc.sft_lr)
        g = torch.Generator().manual_seed(tc.seed + 1)
        eos = self.engine.eos_ids[0]
        for step in range(tc.sft_warmup_steps):
            pick = torch.randint(len(with_offline), (tc.sft_batch_size,), generator=g).tolist()
            samples = [self.train_set[with_offline[i]] for i in pick]
            batch = encode_prompts(self.processor, samples, self.cfg.data, self.train_set.loader)
            rows = [
                tokenize_offline(
                    self.processor.tokenizer, s.record.offline_output, eos, self.sampling.max_new_tokens
                )[0]
                for s in samples
            ]
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), self.engine.pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, r in enumerate(rows):
                ids[i, : len(r)], mask[i, : len(r)] = r, 1
            logp, _ = response_logprobs(
                self.model, expand(batch, [1] * len(samples)), ids, mask, self.engine.banned, 1.0, self.dummy
            )
            loss = -(logp * mask).sum() / mask.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.max_grad_norm)
            opt.step()
            if step % 10 == 0 or step == tc.sft_warmup_steps - 1:
                self.logger.log(0, {"sft/loss": float(loss.detach()), "sft/step": step}, ("sft/loss",))
        return True

    def validate(self) -> dict[str, float]:
        if not self.val_idx:
            return {}
        metrics, generations = evaluate(
            self.engine, self.processor, self.val_set, self.val_idx, self.val_sampling, self.cfg.reward
        )
        path = os.path.join(self.cfg.trainer.output_dir, "generations.jsonl")
        with open(path, "a", encoding="utf-8") as f:
            for g in generations[:8]:
                f.write(json.dumps({"step": self.step, **g}) + "\n")
        return metrics

    # ----------------------------------------------------------------------------------- the loop
    def _resume(self) -> None:
        tc = self.cfg.trainer
        ckpt = (
            None
            if tc.resume == "never"
            else (find_latest(tc.output_dir) if tc.resume == "auto" else tc.resume)
        )
        if ckpt is None:
            return
        load_model_weights(self.model, ckpt)
        state = load_trainer_state(ckpt, self.optimizer, self.scheduler)
        self.sampler.load_state_dict(state["sampler"])
        self.step, self.history = state["step"], state.get("history", [])
        self.logger.write(f"resumed from {ckpt} at step {self.step}")

    def save(self) -> None:
        save_checkpoint(
            self.cfg.trainer.output_dir,
            self.step,
            self.model,
            self.processor,
            self.optimizer,
            self.scheduler,
            {"sampler": self.sampler.state_dict(), "history": self.history},
            keep_last=self.cfg.trainer.keep_last,
        )

    def train(self) -> dict[str, float]:
        tc = self.cfg.trainer
        self._resume()
        if self.step == 0:
            before = self.validate()
            self.history.append({"step": 0, **before})
            self.logger.log(0, before)
            if self.sft_warmup():
                warm = {f"{k}_after_warmup": v for k, v in self.validate().items()}
                self.history.append({"step": 0, **warm})
                self.logger.log(0, warm)
        while self.step < tc.max_steps:
            metrics = self.rl_step()
            self.step += 1
            if tc.val_every and self.step % tc.val_every == 0 and self.step < tc.max_steps:
                metrics.update(self.validate())
            self.history.append(
                {
                    "step": self.step,
                    **{k: v for k, v in metrics.items() if "/" in k and k.split("/")[0] in ("reward", "val")},
                }
            )
            self.logger.log(self.step, metrics, ("reward/overall", "reward/accuracy", "val/accuracy"))
            if tc.save_every and self.step % tc.save_every == 0:
                self.save()
        final = self.validate()
        self.logger.log(self.step, final)
        self.history.append({"step": self.step, **final})
        self.save()  # (re)saves the last step with the final validation in its history
        self.logger.close()
        return final
