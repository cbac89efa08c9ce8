"""MINERVA prompt: five answer choices, one letter.

MINERVA (Nagrani et al., arXiv 2505.00681; data: github.com/google-deepmind/neptune#minerva) gives
every question five choices (the answer and four decoys) and scores multiple-choice accuracy. The
prompt follows VLMEvalKit's MINERVA dataset (``vlmeval/dataset/minerva.py``, video input): a system
line asking for the best option (A/B/C/D/E), the question, the options as ``(A) text`` lines, and
"Answer with ONLY the single uppercase letter of the correct option (A/B/C/D/E)." The ``thinking``
style replaces that last line by the reward task's reasoning instruction.
"""

from __future__ import annotations

from ...data.prompt import check_style
from ...data.records import Record
from ...errors import UserError
from ...rewards import answer_instruction
from .ovobench import option_text

SOURCE = (
    "MINERVA paper (arXiv 2505.00681): 5 choices, MCQ accuracy; prompt as VLMEvalKit "
    "vlmeval/dataset/minerva.py (github.com/zyuhan1999/VLMEvalKit)"
)
SYSTEM = (
    "You are an AI assistant responsible for answering questions about a video.\n"
    "Select the best option (A/B/C/D/E) based on the video.\n"
)
ANSWER_ONLY = "Answer with ONLY the single uppercase letter of the correct option (A/B/C/D/E)."
N_OPTIONS = 5


def build_prompt(record: Record, style: str) -> str:
    check_style(style)
    options = record.options or []
    if len(options) != N_OPTIONS:
        raise UserError(
            f"MINERVA record {record.problem_id!r} has {len(options)} options; MINERVA questions have "
            f"{N_OPTIONS} (the answer and four decoys)"
        )
    lines = "\n".join(f"({chr(65 + i)}) {option_text(o)}" for i, o in enumerate(options))
    tail = ANSWER_ONLY
    if style == "thinking":
        tail = answer_instruction(record.problem_type, options, reasoning=True)
    return f"{SYSTEM}\nQuestion: {record.problem}\nOptions:\n{lines}\n\n{tail}"
