"""Multi-turn episodes: the policy's turn may end in tool calls; their results (text and frames)
are appended as the chat template's tool turn and generation goes on, until a final answer,
``tools.max_turns`` tool turns, or the episode's token budget.

Token in, token out: the episode is one growing sequence of token ids and the media in the order
their placeholders appear. The policy's ids are appended exactly as the engine produced them (never
decoded and re-tokenised); a tool turn is rendered alone by the chat template (the text that follows
the policy's end-of-turn token, up to the next assistant opening) and encoded by the processor with
its frames, then appended. The trainer trains on :attr:`Episode.ids` under :attr:`Episode.policy_mask`
(1 on the policy's own tokens, 0 on tool results and their vision tokens), with every frame in the
forward pass.

Engines that run their own processor (vLLM) get the same context as :attr:`Episode.engine_ids`:
the prompt's and tool turns' tokens with each medium one unexpanded placeholder, the policy's
tokens as sampled, and the raw media in order (:attr:`Episode.media`); their processor expands the
placeholders exactly as the HF processor did for :attr:`Episode.inputs`
(``tests/rollout/test_vllm_engine.py`` checks episodes token for token against the HF engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..data.dataset import encode_loaded, raw_media
from ..errors import UserError
from ..models.families import VISION_INPUTS, get_family
from ..models.inputs import PromptBatch, select_prompts
from ..tools.calls import CallOutcome, EpisodeTools
from .base import Prompt, Responses, SamplingConfig

_PER_ROW = ("input_ids", "attention_mask", "mm_token_type_ids")
ANSWER, MAX_TURNS, BUDGET, LENGTH = "answer", "max_turns", "budget", "length"


@dataclass
class Episode:
    """One multi-turn rollout.

    Attributes:
        prompt_len: Tokens of the first prompt (system turn with the tool list, user turn, the
            assistant opening).
        ids: Every token after the prompt: the policy's turns and the tool turns, in order.
        policy_mask: 1 where ``ids`` holds a token the policy generated (each turn's end-of-turn
            token included), 0 on tool turns.
        inputs: The whole episode as the model takes it (``input_ids`` = prompt + ``ids``, every
            frame's ``pixel_values*`` and grids in placeholder order).
        video_count, image_count: Media of the whole episode (the prompt's and the tools').
        turns: Per policy turn: its text and the calls it made (:meth:`CallOutcome.row`).
        finish: Why it ended: ``answer`` (a turn without calls), ``max_turns``, ``budget``
            (the token budget), ``length`` (a turn hit ``max_new_tokens``).
        final_text: The last policy turn's text (what the reward scores).
    """

    prompt_len: int
    ids: list[int] = field(default_factory=list)
    policy_mask: list[int] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    video_count: int = 0
    image_count: int = 0
    turns: list[dict[str, Any]] = field(default_factory=list)
    finish: str = ""
    final_text: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    calls: list[CallOutcome] = field(default_factory=list)  # every call in order, results with their media
    logprobs: list[float] = field(default_factory=list)  # the engine's, per token of ids (NaN: tool tokens)
    tool_inputs: dict[str, Any] = field(default_factory=dict)  # vision tensors of the tool turns, in order
    # the episode as engines with their own processor take it (None: the first batch had no texts)
    engine_ids: list[int] | None = None
    media: dict[str, list] = field(default_factory=lambda: {"video": [], "image": []})

    def response_types(self) -> torch.Tensor | None:
        """``mm_token_type_ids`` of :attr:`ids` (vision tokens of tool turns typed), when the
        family's processor returns such ids."""
        types = self.inputs.get("mm_token_type_ids")
        return None if types is None else types[0, self.prompt_len :]

    @property
    def tool_turns(self) -> int:
        return sum(1 for t in self.turns if t["calls"])

    def batch(self) -> PromptBatch:
        """The episode so far as the next turn's prompt (for every engine)."""
        if self.engine_ids is None:
            return PromptBatch(self.inputs, [self.video_count], [self.image_count])
        return PromptBatch(
            self.inputs,
            [self.video_count],
            [self.image_count],
            media=[self.media],
            token_prompts=[self.engine_ids],
        )


def tool_turn_text(processor, results: list[CallOutcome], eot: str) -> str:
    """The text that follows the policy's end-of-turn token when its calls have these results:
    the template's tool turn and the next assistant opening (``<think>`` included for thinking
    templates), with one vision placeholder per returned clip or image.

    Rendered as the difference of two renders of a fixed conversation, so it is exactly what the
    family's template writes there, whatever its format."""
    base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    tool_messages = [
        {
            "role": "tool",
            "content": [{"type": "text", "text": o.result.text}]
            + [{"type": "video"} for _ in o.result.videos]
            + [{"type": "image"} for _ in o.result.images],
        }
        for o in results
    ]
    before = processor.apply_chat_template(base, tokenize=False)
    after = processor.apply_chat_template(base + tool_messages, tokenize=False, add_generation_prompt=True)
    if not after.startswith(before) or eot not in before:
        raise UserError("the chat template renders earlier turns differently once a tool turn follows")
    return before[before.rindex(eot) + len(eot) :] + after[len(before) :]


def _append(inputs: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` followed by ``more`` (one row each): per-token keys joined along the sequence,
    vision tensors after the ones already there (placeholder order)."""
    out = dict(inputs)
    for key in _PER_ROW:
        if more.get(key) is not None:
            a = inputs.get(key)
            if a is None:  # e.g. mm_token_type_ids appearing with the first media
                a = (
                    torch.zeros_like(inputs["input_ids"])
                    if key != "attention_mask"
                    else torch.ones_like(inputs["input_ids"])
                )
            out[key] = torch.cat([a, more[key].to(a.dtype)], dim=1)
    return _append_media(out, more)


def _generated(inputs: dict[str, Any], ids: list[int]) -> dict[str, Any]:
    """The generated ``ids`` as per-token inputs (text: no media, attended)."""
    t = torch.tensor([ids], dtype=torch.long)
    more = {"input_ids": t, "attention_mask": torch.ones_like(t)}
    if inputs.get("mm_token_type_ids") is not None:
        more["mm_token_type_ids"] = torch.zeros_like(t)
    return more


def first_turn(processor, prompt: Prompt, model_family: str) -> PromptBatch:
    """A rendered prompt (text with ``tools=``, its media) encoded as an episode's first input."""
    return encode_loaded(processor, [prompt.text], [(prompt.videos, prompt.images)], model_family)


def prompt_row(batch: PromptBatch, row: int) -> PromptBatch:
    """Prompt ``row`` of a (left-padded) batch alone, its padding cut off: an episode's ids are
    exactly the prompt's tokens followed by what comes after."""
    return select_prompts(batch, [row])


class _Run:
    """One episode in progress: what its next turn is sampled from, and taking that turn."""

    def __init__(self, processor, first: PromptBatch, tools: EpisodeTools, model_family: str, eos_id: int):
        self.processor, self.tools, self.model_family = processor, tools, model_family
        self.family, self.settings = get_family(model_family), tools.settings
        inputs = dict(first.inputs)
        self.ep = Episode(prompt_len=int(inputs["input_ids"].shape[1]), inputs=inputs)
        self.ep.video_count, self.ep.image_count = first.video_counts[0], first.image_counts[0]
        if first.texts is not None and first.media is not None:
            self.ep.engine_ids = self._tokens(first.texts[0])
            self.ep.media = {k: list(first.media[0].get(k, [])) for k in ("video", "image")}
        self.eot = processor.tokenizer.convert_ids_to_tokens(eos_id)
        self.tool_turns, self.done = 0, False

    def _tokens(self, text: str) -> list[int]:
        """Rendered text as ids, vision placeholders unexpanded (as a vLLM text prompt is tokenised)."""
        return self.processor.tokenizer(text, add_special_tokens=False)["input_ids"]

    def turn_sampling(self, sampling: SamplingConfig) -> SamplingConfig | None:
        """This turn's settings (its length within the episode's token budget), or None: no room."""
        room = self.settings.max_episode_tokens - int(self.ep.inputs["input_ids"].shape[1])
        if room <= 0:
            self._end(BUDGET)
            return None
        return sampling.sampling(max_new_tokens=min(sampling.max_new_tokens or room, room))

    def take(self, out: Responses, row: int, turn: SamplingConfig, sampling: SamplingConfig) -> None:
        """Append the policy's turn (row ``row`` of ``out``) and, when it calls tools, their results."""
        ep = self.ep
        n = int(out.mask[row].sum())
        ids = out.ids[row, :n].tolist()
        ep.ids += ids
        ep.policy_mask += [1] * n
        ep.logprobs += out.logprobs[row, :n].tolist() if out.logprobs is not None else [float("nan")] * n
        ep.inputs = _append(ep.inputs, _generated(ep.inputs, ids))
        if ep.engine_ids is not None:
            ep.engine_ids += ids
        text = out.texts[row]
        _, bodies = self.family.tokens.split_tool_calls(text)
        record = {"text": text, "calls": []}
        ep.turns.append(record)
        ep.final_text = text
        if out.truncated and out.truncated[row]:
            self._end(
                LENGTH
                if not sampling.max_new_tokens or turn.max_new_tokens == sampling.max_new_tokens
                else BUDGET
            )
            return
        if not bodies:
            self._end(ANSWER)
            return
        allowed = self.tool_turns < self.settings.max_turns
        outcomes = self.tools.run_turn(bodies, allowed=allowed)
        record["calls"] = [o.row() for o in outcomes]
        ep.calls += outcomes
        if not allowed:
            self._end(MAX_TURNS)
            return
        self.tool_turns += 1
        videos = [v for o in outcomes for v in o.result.videos]
        images = [im for o in outcomes for im in o.result.images]
        text = tool_turn_text(self.processor, outcomes, self.eot)
        encoded = encode_loaded(self.processor, [text], [(videos, images)], self.model_family).inputs
        turn_ids = encoded["input_ids"][0].tolist()
        if len(ep.ids) + ep.prompt_len + len(turn_ids) >= self.settings.max_episode_tokens:
            self._end(BUDGET)  # the results would not fit: the episode ends at the calls
            return
        ep.ids += turn_ids
        ep.policy_mask += [0] * len(turn_ids)
        ep.logprobs += [float("nan")] * len(turn_ids)
        ep.inputs = _append(ep.inputs, encoded)
        ep.tool_inputs = _append_media(ep.tool_inputs, encoded)
        if ep.engine_ids is not None:
            ep.engine_ids += self._tokens(text)
            more = raw_media(videos, images)
            ep.media = {k: ep.media[k] + list(more.get(k, [])) for k in ("video", "image")}
        ep.video_count += len(videos)
        ep.image_count += len(images)

    def _end(self, why: str) -> None:
        self.ep.finish, self.done = why, True
        self.ep.counts = self.tools.counts()


def run_episode(
    engine,
    processor,
    first: PromptBatch,
    tools: EpisodeTools,
    sampling: SamplingConfig,
    model_family: str,
    seed: int | None = None,
) -> Episode:
    """One episode from ``first`` (one encoded prompt, rendered with ``tools=``:
    :func:`first_turn`, or a row of the trainer's batch) on ``engine``'s batch path (``generate``),
    calls answered by ``tools``."""
    if seed is not None:
        torch.manual_seed(seed)
    run = _Run(processor, first, tools, model_family, engine.eos_ids[0])
    while not run.done:
        turn = run.turn_sampling(sampling)
        if turn is not None:
            run.take(engine.generate(run.ep.batch(), [1], turn), 0, turn, sampling)
    return run.ep


def collate(episodes: list[Episode], pad_id: int) -> PromptBatch:
    """Episodes in progress as one left-padded batch (per-token keys padded on the left, each row's
    media after the previous row's), for one ``generate`` over all of them."""
    width = max(int(e.inputs["input_ids"].shape[1]) for e in episodes)
    inputs: dict[str, Any] = {}
    for key in _PER_ROW:
        rows = [e.inputs.get(key) for e in episodes]
        if all(r is None for r in rows):
            continue
        fill = pad_id if key == "input_ids" else 0
        padded = []
        for e, r in zip(episodes, rows, strict=True):
            r = r if r is not None else torch.zeros_like(e.inputs["input_ids"])
            pad = torch.full((1, width - r.shape[1]), fill, dtype=r.dtype)
            padded.append(torch.cat([pad, r], dim=1))
        inputs[key] = torch.cat(padded)
    for pix, grid, extra in VISION_INPUTS.values():
        for key in (pix, grid, extra):
            parts = [
                torch.as_tensor(e.inputs[key]) for e in episodes if key and e.inputs.get(key) is not None
            ]
            if parts:
                inputs[key] = torch.cat(parts)
    text_path = all(e.engine_ids is not None for e in episodes)
    return PromptBatch(
        inputs,
        [e.video_count for e in episodes],
        [e.image_count for e in episodes],
        media=[e.media for e in episodes] if text_path else None,
        token_prompts=[e.engine_ids for e in episodes] if text_path else None,
    )


def _append_media(media: dict[str, Any], encoded: dict[str, Any]) -> dict[str, Any]:
    """The vision tensors of a tool turn after the earlier ones (placeholder order)."""
    out = dict(media)
    for pix, grid, extra in VISION_INPUTS.values():
        for key in (pix, grid, extra):
            if key and encoded.get(key) is not None:
                add = torch.as_tensor(encoded[key])
                out[key] = add if media.get(key) is None else torch.cat([torch.as_tensor(media[key]), add])
    return out


class GivenTurns:
    """An engine whose turns are given (an offline episode's, ``records.offline_turns``), each cut to
    the turn's token limit with the end-of-turn token appended; the tools still run. With
    ``then_engine`` the turns after the given ones are ``engine``'s own (a scripted opening)."""

    def __init__(self, engine, tokenizer, turns: list[str], key: str, then_engine: bool = False):
        self.engine, self.eos_ids, self.pad_id = engine, engine.eos_ids, engine.pad_id
        self.tokenizer, self.turns, self.key, self.then_engine = tokenizer, list(turns), key, then_engine

    def generate(self, batch, repeats, sampling) -> Responses:
        if not self.turns and self.then_engine:
            return self.engine.generate(batch, repeats, sampling)
        if not self.turns:
            raise UserError(
                f"{self.key}: offline_turns ran out before the episode ended (its last turn must answer, "
                "without a tool call)"
            )
        text = self.turns.pop(0)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.eos_ids[0]]
        limit = sampling.max_new_tokens or len(ids)
        cut = len(ids) > limit
        if cut:  # scored on what is trained: the kept tokens
            ids = ids[:limit]
            text = self.tokenizer.decode(ids)
        rows = sum(repeats)  # every row of the batch takes the given turn (episodes advancing together)
        t = torch.tensor([ids] * rows)
        return Responses(ids=t, mask=torch.ones_like(t), texts=[text] * rows, truncated=[cut] * rows)


def replay_episode(
    engine,
    processor,
    first: PromptBatch,
    tools: EpisodeTools,
    turns: list[str],
    sampling,
    model_family,
    key: str,
) -> Episode:
    """An offline episode: the given policy turns, the tool results between them run for real (so
    they are the tools' own on this video), token for token as an online episode is assembled."""
    given = GivenTurns(engine, processor.tokenizer, turns, key)
    return run_episode(given, processor, first, tools, sampling, model_family)


def request_episodes(engine, processor, request, model_family: str) -> Responses:
    """``request.n`` episodes of one request's prompt (the request path of every engine), one after
    another, each with fresh tools (``request.episode_tools()``) and, for a seeded request, torch
    seeded ``seed + k`` for episode ``k`` (the HF engine's draws)."""
    first = first_turn(processor, request.prompt, model_family)
    episodes = []
    for k in range(request.n):
        seed = None if request.seed is None else request.seed + k
        tools = request.episode_tools()
        episodes.append(run_episode(engine, processor, first, tools, request.sampling, model_family, seed))
    return episode_responses(episodes, engine.pad_id)


def run_batch_episodes(
    engine,
    processor,
    batch: PromptBatch,
    repeats: list[int],
    sampling: SamplingConfig,
    model_family: str,
    make_tools: list,
) -> Responses:
    """``repeats[p]`` episodes of each prompt ``p`` of ``batch`` (the trainer's rollouts; prompts
    rendered with ``tools=``), in prompt order; ``make_tools[p]()`` gives an episode's tools.

    The episodes advance together: each round, every unfinished episode's next turn is sampled in
    one ``generate`` (those with the same turn length), then each takes its turn and runs its calls."""
    runs = [
        _Run(processor, prompt_row(batch, p), make_tools[p](), model_family, engine.eos_ids[0])
        for p, count in enumerate(repeats)
        for _ in range(count)
    ]
    while True:
        turns = [(r, r.turn_sampling(sampling)) for r in runs if not r.done]
        turns = [(r, t) for r, t in turns if t is not None]
        if not turns:
            break
        for limit in sorted({t.max_new_tokens for _, t in turns}):  # one generate per turn length
            group = [(r, t) for r, t in turns if t.max_new_tokens == limit]
            out = engine.generate(
                collate([r.ep for r, _ in group], engine.pad_id), [1] * len(group), group[0][1]
            )
            for row, (r, t) in enumerate(group):
                r.take(out, row, t, sampling)
    return episode_responses([r.ep for r in runs], engine.pad_id)


def render_with_tools(
    processor, content: list[dict[str, Any]], tools: EpisodeTools, **template_kwargs
) -> str:
    """The first prompt of an episode: the user turn with the tool list in the template's own
    place (``tools=``), generation prompt added."""
    return processor.apply_chat_template(
        [{"role": "user", "content": content}],
        tools=tools.schemas(),
        add_generation_prompt=True,
        tokenize=False,
        **template_kwargs,
    )


def episode_responses(episodes: list[Episode], pad_id: int) -> Responses:
    """Episodes as one :class:`Responses`: each row the whole episode after the prompt, mask 1 on
    the policy's tokens, the text the last policy turn's, ``truncated`` for a turn cut at the limit."""
    width = max([len(e.ids) for e in episodes] + [1])
    ids = torch.full((len(episodes), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(episodes), width), dtype=torch.long)
    for i, e in enumerate(episodes):
        ids[i, : len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
        mask[i, : len(e.ids)] = torch.tensor(e.policy_mask, dtype=torch.long)
    logprobs = None
    if any(any(v == v for v in e.logprobs) for e in episodes):  # the engine returned its log-probs
        # NaN where it did not: tool turns, and turns it was given (an offline first turn)
        logprobs = torch.full((len(episodes), width), float("nan"))
        for i, e in enumerate(episodes):
            logprobs[i, : len(e.ids)] = torch.tensor(e.logprobs)
    return Responses(
        ids=ids,
        mask=mask,
        texts=[e.final_text for e in episodes],
        truncated=[e.finish == LENGTH for e in episodes],
        logprobs=logprobs,
        episodes=episodes,
    )
