"""How responses are sampled: one settings type for training rollouts, validation, eval and filter.

:class:`SamplingConfig` is the base of every config section that samples (``rollout``, ``eval``,
``filter``), so the keys (``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``, ...) mean the
same everywhere and are checked here, once; error messages name the section's dotted key. Engines
take a plain :meth:`SamplingConfig.sampling` copy. Each purpose's default response length is
written once, below. Nothing here imports torch (``--help`` and ``eval --list`` must stay fast).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..validation import at_least, in_range, non_negative, require

# default response length of each purpose (tokens), the one place each is written
TRAIN_MAX_NEW_TOKENS = 64  # training rollouts, validation and filter (short answers; configs raise it)
BENCHMARK_MAX_NEW_TOKENS = 1024  # a benchmark that declares none (``BenchmarkSpec.max_new_tokens``)
JUDGE_MAX_NEW_TOKENS = 128  # a local LLM judge's verdict


@dataclass
class SamplingConfig:
    """How responses are sampled.

    Parameters:
        temperature: Softmax temperature; 0 means greedy.
        top_p: Nucleus sampling mass (1.0 keeps all).
        top_k: Keep the k most likely tokens; 0 keeps the whole vocabulary (HF's default is 50).
        max_new_tokens: Response length limit, in tokens.
        min_new_tokens: End-of-turn tokens are suppressed before this many tokens (benchmarks set it
            to ``max_new_tokens`` so every engine generates the same number of tokens). In training
            the engine then samples from that suppressed distribution: its log-probs (the
            ``rollout/logprob_gap_*`` check, rollout correction) are of it, the trainer's are not.
        presence_penalty: Subtracted from the logit of every token already in the response, before
            temperature (OpenAI / vLLM semantics; Qwen3-VL's official evaluation uses 1.5).
        return_logprobs: Also return each sampled token's log-prob (HF keeps every step's scores,
            N x T x vocab floats, during generation; vLLM returns them for free). In training they
            are compared with the trainer's (``rollout/logprob_gap_*``); vLLM, rollout correction
            and the overlapping modes keep them whatever this says.
    """

    # the section whose keys error messages name (``rollout.top_p``, ``eval.top_p``, ...)
    SECTION: ClassVar[str] = "sampling"

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int | None = TRAIN_MAX_NEW_TOKENS
    min_new_tokens: int = 0
    presence_penalty: float = 0.0
    return_logprobs: bool = False

    def __post_init__(self) -> None:
        self.check_sampling()

    def check_sampling(self) -> None:
        """Every sampling key's rule; the message names ``<SECTION>.<key>``."""
        s = self.SECTION
        non_negative(f"{s}.temperature", self.temperature)
        require(self.temperature != float("inf"), f"{s}.temperature", "must be finite", self.temperature)
        in_range(f"{s}.top_p", self.top_p, 0, 1, low_open=True)
        require(
            isinstance(self.top_k, int) and not isinstance(self.top_k, bool) and self.top_k >= 0,
            f"{s}.top_k",
            "must be a whole number >= 0 (0 keeps the whole vocabulary)",
            self.top_k,
        )
        if self.max_new_tokens is not None:  # None: the purpose's own default (a benchmark's)
            at_least(f"{s}.max_new_tokens", self.max_new_tokens, 1)
        non_negative(f"{s}.min_new_tokens", self.min_new_tokens)
        non_negative(f"{s}.presence_penalty", self.presence_penalty)

    def sampling(self, **changes) -> SamplingConfig:
        """A plain :class:`SamplingConfig` of these settings (what engines take), with ``changes``."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(SamplingConfig)}
        return SamplingConfig(**{**values, **changes})

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


SAMPLING_KEYS = tuple(f.name for f in dataclasses.fields(SamplingConfig))
