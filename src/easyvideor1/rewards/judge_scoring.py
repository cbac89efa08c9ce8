"""How an endpoint judge's verdict becomes a reward: the default prompt, the reply formats
(``judge_format.py``), and the scoring phase that asks the judge about the results of judged
tasks and folds the answers in.

Scoring a batch is two phases when ``reward.judge.url`` is set. First every response is scored by
its task's rule as usual (which also reads the answer out of the response). Then, for each result
of a task in ``reward.judge.tasks`` that has an answer, one request is sent
(:func:`submit_judgements`: concurrent, deduplicated, cached, see ``judge.py``), and
:func:`fold_judgements` turns each reply into the result's accuracy. A response without an answer
keeps its rule score (0) without asking, as the official judges do.

A request that failed (after its retries), or a reply that holds no verdict in its format
(``reward.judge.verdict``; a benchmark's official prompt: its own), is never a score: the
result keeps its rule score and gains ``judge_error`` (the reason), plus ``unscored: True`` with
``reward.judge.on_failure=skip`` (training leaves it out of its group). Evaluation reports it as
``not_scored`` either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from .judge import JudgeConfig, JudgeReply, shared_client
from .judge_format import OFFICIAL_REPLIES, VERDICTS, VerdictFormat
from .parsing import clean_short_answer, parse_ground_truth
from .registry import judge_task_names, weights_for

SYSTEM = "You grade answers to questions about videos. Be strict about meaning, lenient about wording."
TEMPLATE = (
    "Does the model answer mean the same as the ground truth?\n"
    "Ground truth: {truth}\nModel answer: {prediction}\n"
    "Give one short sentence of reasoning, then a last line exactly 'Judgement: 1' (same meaning) or "
    "'Judgement: 0' (different)."
)


class JudgeFailed(RuntimeError):
    """The judge gave no verdict (the request failed, or the reply could not be read)."""


def parse_judgement(text: str | None) -> float | None:
    """The verdict after the last ``Judgement:`` (a number in [0, 1]) in the judge's reply, or None."""
    return VERDICTS["default"].read(text)


def parse_correct(text: str | None) -> float | None:
    """1 for a reply that starts "Correct", 0 for "Incorrect", None for anything else
    (VideoReasonBench's official judge format)."""
    return OFFICIAL_REPLIES["correct"].read(text)


def judge_messages(
    prediction: str,
    truth: str,
    question: str | None = None,
    *,
    prompt: str = "",
    official: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages that ask the judge about one answer.

    ``official`` (a benchmark's own judge prompt, already filled in) is sent as the only message,
    as the benchmark's code does; else ``prompt`` (``reward.judge.prompt``, with ``{question}``,
    ``{truth}``, ``{prediction}``) or the default template, whose system message sets the grading
    standard and whose question line, when there is a question, disambiguates short answers.
    """
    if official:
        return [{"role": "user", "content": official}]
    if prompt:
        fields = {"question": question or "", "truth": truth, "prediction": prediction}
        return [{"role": "user", "content": prompt.format(**fields)}]
    user = TEMPLATE.format(truth=truth, prediction=prediction)
    if question:
        user = f"Question: {question}\n{user}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def verdict(reply: JudgeReply, reply_format: str | VerdictFormat = "judgement") -> float:
    """The verdict in a reply, read in ``reply_format`` (an official reply format's name, or a
    :class:`VerdictFormat`); raises :class:`JudgeFailed` with the reason when there is none."""
    if not reply.ok:
        raise JudgeFailed(f"judge request failed: {reply.error}")
    form = OFFICIAL_REPLIES[reply_format] if isinstance(reply_format, str) else reply_format
    value = form.read(reply.text)
    if value is None:
        raise JudgeFailed(f"judge reply has no verdict: {(reply.text or '')[:160]!r}")
    return value


def ask_judge(cfg: JudgeConfig, messages: list[dict[str, str]], reply_format: str | None = None) -> float:
    """One verdict from the endpoint (waits); :class:`JudgeFailed` when there is none. The reply
    is read in ``reply_format`` (an official prompt's) or else in ``cfg.verdict``."""
    return verdict(shared_client(cfg).ask(messages, cfg), reply_format or cfg.verdict_format)


# ------------------------------------------------------------------------- the scoring phase

Slot = tuple[int, Future]  # (index of the result, future of its JudgeReply)


def judged_tasks(config) -> set[str]:
    """The canonical names of the tasks the endpoint judge scores under the reward ``config``
    (empty without a judge); ``reward.judge.tasks`` may spell names any way the registry accepts
    (``open-ended``), an unknown one raises ``UnknownTaskError`` naming it."""
    if not config.judge.enabled or config.reward_function:
        return set()
    return judge_task_names(config.judge.tasks)


def submit_judgements(
    items: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]], config, indices=None
) -> list[Slot]:
    """Send the judge requests of ``results`` (rule-scored ``items``; only ``indices`` if given)
    and return at once; :func:`fold_judgements` collects the replies."""
    cfg, tasks = config.judge, judged_tasks(config)
    slots: list[Slot] = []
    for i in range(len(results)) if indices is None else indices:
        res = results[i]
        if str(res.get("task")) not in tasks or "error" in res or res.get("prediction") is None:
            continue
        item = items[i]
        truth = clean_short_answer(parse_ground_truth(item.get("ground_truth")))
        question = item.get("question")
        messages = judge_messages(
            str(res["prediction"]), truth, question if question else None, prompt=cfg.prompt
        )
        slots.append((i, shared_client(cfg).submit(messages, cfg)))
    return slots


def fold_judgements(results: list[dict[str, Any]], slots: list[Slot], config) -> None:
    """Wait for each slot's reply and put its verdict into the result (in place): ``accuracy``
    and ``judge`` become the verdict and ``overall`` is recomputed with the task's weights; a
    failure sets ``judge_error`` (and ``unscored`` under ``on_failure=skip``) instead."""
    for i, future in slots:
        reply: JudgeReply = future.result()
        res = results[i]
        res["judge_cached"] = reply.cached
        if not reply.cached:
            res["judge_latency_s"] = reply.latency_s
        try:
            value = verdict(reply, config.judge.verdict_format)
        except JudgeFailed as failure:
            res["judge_error"] = str(failure)
            if config.judge.on_failure == "skip":
                res["unscored"] = True
            continue
        weights = weights_for(config, str(res["task"]))
        res["accuracy"] = res["judge"] = value
        res["overall"] = weights.accuracy * value + weights.format * float(res.get("format", 0.0))


def judge_results(items: Sequence[Mapping[str, Any]], results: list[dict[str, Any]], config) -> None:
    """Both phases at once (waits): the per-record path of evaluation."""
    if config.judge.enabled:
        fold_judgements(results, submit_judgements(items, results, config), config)
