"""OVO-Bench prompts, as its official offline evaluation builds them.

Source: github.com/JoeLeelyf/OVO-Bench, ``constant.py`` (BR/REC/SSR/CRR prompt templates) and
``utils/OVOBench.py`` (``OVOBenchOffline.build_prompt``): backward-tracing and real-time tasks list
the options as ``A. x; B. y;`` and ask for the letter only; the forward-active tasks wrap the step
(SSR), the question (CRR) or the counting question (REC, "How many times did they <activity>?",
which the unified file stores as ``problem``) in a task description that ends with
'Answer only with "Yes" or "No"' (SSR, CRR) or asks for a single number (REC).

The ``direct`` style is the official text exactly. The ``thinking`` style keeps the task
description and replaces its answer-only lines by the reward task's reasoning instruction, so the
model may think and the scorer still reads its answer. Scoring is the reward library's (letter,
yes/no, whole-number count), which is stricter than the official substring match ("NO" in "KNOW").
"""

from __future__ import annotations

import re

from ...data.prompt import check_style
from ...data.records import Record
from ...errors import UserError
from ...rewards import answer_instruction

SOURCE = "https://github.com/JoeLeelyf/OVO-Bench (constant.py, utils/OVOBench.py build_prompt)"
_NO_EXTRA = "Do not include any additional text or explanation in your response.\n"
_CURLY_YES_NO = "Answer only with \u201cYes\u201d or \u201cNo\u201d.\n"

# (task description, answer-only lines): description + answer lines == the official template.
_BACKWARD_REALTIME = (
    "\nQuestion: {}\nOptions:\n{}\n\n",
    "Respond only with the letter corresponding to your chosen option (e.g., A, B, C). \n" + _NO_EXTRA,
)
_REC = (
    "\nYou're watching a video in which people may perform a certain type of action repetively. \n"
    "The person performing this kind of action are referred to as 'they' in the following statement.\n"
    "You're task is to count how many times have different people in the video perform this kind of "
    "action in total.\n"
    "One complete motion counts as one. \n"
    "Now, answer the following question: {}\n",
    "Provide your answer as a single number (e.g., 0, 1, 2, 3\u2026) indicating the total count.\n"
    + _NO_EXTRA,
)
_SSR = (
    "\nYou're watching a tutorial video which contain a sequential of steps. \n"
    "The following is one step from the whole procedures: \n{}\n"
    "Your task is to determine if the man or woman in the video is currently performing this step.\n",
    _CURLY_YES_NO + _NO_EXTRA,
)
_CRR = (
    "\nYou're responsible of answering questions based on the video content. \n"
    "The following question are relevant to the latest frames, i.e. the end of the video.\n{}\n"
    "Decide whether existing visual content, especially latest frames, i.e. frames that near the end "
    "of the video, provide enough information for answering the question.\n",
    _CURLY_YES_NO + _NO_EXTRA,
)
FORWARD = {"REC": _REC, "SSR": _SSR, "CRR": _CRR}
_LABEL = re.compile(r"^\s*\(?[A-Z]\)?\s*[:.)]\s*")


def option_text(option: str) -> str:
    """An option without its letter label ("A: red" / "A. red" -> "red"): the official code
    letters the raw option texts itself."""
    return _LABEL.sub("", option, count=1).strip()


def format_options(options: list[str]) -> str:
    """Official option line: ``A. x; B. y; C. z;``."""
    return "; ".join(f"{chr(65 + i)}. {option_text(o)}" for i, o in enumerate(options)) + ";"


def ovo_task(record: Record) -> str:
    return str(record.extra.get("ovo_task") or record.problem_type).strip().upper()


def build_prompt(record: Record, style: str) -> str:
    """The OVO-Bench prompt of ``record`` (see the module docstring for the source)."""
    check_style(style)
    task = ovo_task(record)
    if task in FORWARD:
        description, answer_only = FORWARD[task]
        description = description.format(record.problem)
    else:
        if not record.options:
            raise UserError(
                f"OVO-Bench record {record.problem_id!r} (task {task}): a backward/real-time question "
                "needs options"
            )
        description, answer_only = _BACKWARD_REALTIME
        description = description.format(record.problem, format_options(record.options))
    if style == "direct":
        return description + answer_only
    return description + answer_instruction(record.problem_type, record.options, reasoning=True) + "\n"
