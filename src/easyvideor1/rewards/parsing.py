"""Answer extraction shared by every task: tags, reasoning blocks, final statements, boxes.

Nothing here rewrites a response: helpers return views (slices, parsed values) of the text they
are given. The published reference stripped whitespace around `<`, `>` and `/` in the whole response,
which corrupted code, fractions and free text; this module never does.

Time is bounded: every scan here is linear (tags and boxes are paired by one pass over their
positions, never by a lazy `.*?` retried from each opening; no regex backtracks over a run of
whitespace), and rule-based answers are read from the last `MAX_SCORED_CHARS` characters of the
response without its reasoning (`scored_tail`), where answers live. An adversarial 1 MB response
scores in milliseconds.

A response commits to an answer by an `<answer>` tag, an explicit statement ("the answer is X") or a
`\\boxed{}`; `committed_answers` lists every such commitment outside the reasoning, and
`ExtractedAnswer.read` accepts an answer only when all of them name the same value for the task.
Invisible characters (zero-width spaces and joiners, the word joiner, the byte-order mark, the soft
hyphen) are removed before any answer is read: "A\\u200bB" is the word "AB", not the letter A. The
width forms are then unified (`reading_form`: the compatibility normalisation NFKC applies to
fullwidth and halfwidth characters), so fullwidth letters, digits and punctuation read as their ASCII
forms ("答案是Ｂ" states B, "１２．５" is 12.5). The rest of NFKC is not applied: it would turn the
answer "O(n²)" into "O(n2)" and "Cu²⁺" into "Cu2+". ASCII text is unchanged.
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

_Value = TypeVar("_Value")

# Characters of a reasoning-free response that rule-based scoring reads: its tail, where the answer
# is. 32k characters hold ~8k tokens of answer text, far more than any rule-based answer needs.
MAX_SCORED_CHARS = 32_768

_ANSWER_OPEN_RE = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE_RE = re.compile(r"</answer>", re.IGNORECASE)
_THINK_OPEN_RE = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE_RE = re.compile(r"</think>", re.IGNORECASE)
# Placeholder tokens that leak into some ground truths, e.g. Charades-STA's `<[PLHD21_never_used_...]>`.
_PLACEHOLDER_RE = re.compile(r"<\[[^\]<>]*\]>|<\|[^|<>]*\|>")

# "the final answer is X", "Therefore, the final answer is: X", "Answer: X", "答案是X".
# A verb or a colon is required so that "the answer choices are ..." is not a statement.
_STATEMENT_RE = re.compile(
    r"(?:\b(?:final\s++answer|(?:correct|best|right)\s++(?:answer|option|choice)|answer)\b[*_]*+"
    r"(?:\s++(?:is|would\s++be|should\s++be|will\s++be)\b[*_]*+\s*+[:：]?|\s*+[:：=])"
    r"|答案\s*+(?:是|为|：|:))",
    re.IGNORECASE,
)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*+\{")
_BRACE_RE = re.compile(r"[{}]")
# Characters that render as nothing: a model (or an attack) can put them between letters or digits.
_INVISIBLE_RE = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")


def remove_invisible(text: str) -> str:
    """`text` without zero-width spaces/joiners (U+200B-U+200D), the word joiner (U+2060), the
    byte-order mark (U+FEFF) and soft hyphens (U+00AD): what a reader sees is what is scored."""
    return _INVISIBLE_RE.sub("", text)


def _width_forms() -> dict[int, int]:
    """Each character whose compatibility decomposition is a `<wide>` or `<narrow>` form -> that
    character: the fullwidth ASCII block (U+FF01-U+FF5E), the ideographic space, halfwidth katakana
    and hangul, fullwidth symbols (one character each way, so offsets into the text are kept)."""
    table = {}
    for code in (0x3000, *range(0xFF00, 0xFFF0)):
        kind, *target = unicodedata.decomposition(chr(code)).split() or [""]
        if kind in ("<wide>", "<narrow>") and len(target) == 1:
            table[code] = int(target[0], 16)
    return table


_WIDTH_FORMS = _width_forms()


def reading_form(text: str) -> str:
    """`text` as answers are read from it: invisible characters removed, fullwidth and halfwidth
    forms made plain (`Ｂ`, `（Ｂ）`, `１２．５` become `B`, `(B)`, `12.5`). Superscripts, ligatures and
    the other compatibility characters are kept ("O(n²)" stays). ASCII text is returned as it is."""
    text = remove_invisible(text)
    return text if text.isascii() else text.translate(_WIDTH_FORMS)


# --------------------------------------------------------------------------- tags and reasoning


def _blocks(text: str, opening: re.Pattern[str], closing: re.Pattern[str]) -> list[tuple[int, int, int, int]]:
    """`(start, content_start, content_end, end)` of each complete block, left to right.

    The same blocks as the lazy regex `open(.*?)close` finds, in one linear pass: the positions of
    every opening and closing are listed once and paired with two pointers (the regex would rescan
    the rest of the text from each unmatched opening, quadratic on "<answer>" * n).
    """
    opens = [(m.start(), m.end()) for m in opening.finditer(text)]
    closes = [(m.start(), m.end()) for m in closing.finditer(text)]
    blocks, position, j = [], 0, 0
    for start, content_start in opens:
        if start < position:
            continue  # inside the previous block
        while j < len(closes) and closes[j][0] < content_start:
            j += 1
        if j == len(closes):
            break
        content_end, end = closes[j]
        blocks.append((start, content_start, content_end, end))
        position = end
    return blocks


def answer_tag_contents(text: str, strip: bool = True) -> list[str]:
    """Contents of every complete `<answer>...</answer>` in `text`, in order (stripped unless
    `strip=False`: code keeps its indentation)."""
    found = [text[a:b] for _, a, b, _ in _blocks(text, _ANSWER_OPEN_RE, _ANSWER_CLOSE_RE)]
    return [t.strip() for t in found] if strip else found


def strip_think(text: str) -> str:
    """`text` without its reasoning.

    Removes complete `<think>...</think>` blocks; keeps only what follows a remaining `</think>`
    (chat templates that open the block in the prompt); drops an unterminated `<think>` tail (a
    truncated response has no answer yet).
    """
    pieces, position = [], 0
    for start, _, _, end in _blocks(text, _THINK_OPEN_RE, _THINK_CLOSE_RE):
        pieces.append(text[position:start])
        position = end
    pieces.append(text[position:])
    body = "".join(pieces)
    last_close = None
    for last_close in _THINK_CLOSE_RE.finditer(body):  # noqa: B007 - the last one is wanted
        pass
    if last_close is not None:
        body = body[last_close.end() :]
    opening = _THINK_OPEN_RE.search(body)
    if opening:
        body = body[: opening.start()]
    return body


def scored_tail(text: str, limit: int = MAX_SCORED_CHARS) -> str:
    """The last `limit` characters of `text`: what rule-based scoring reads (answers come last)."""
    return text if len(text) <= limit else text[-limit:]


def has_reasoning(text: str) -> bool:
    """True if a non-empty reasoning block precedes the first `<answer>` (or the end of the text)."""
    answer = _ANSWER_OPEN_RE.search(text)
    head = text if answer is None else text[: answer.start()]
    for _, content_start, content_end, _ in _blocks(head, _THINK_OPEN_RE, _THINK_CLOSE_RE):
        if head[content_start:content_end].strip():
            return True
    close = _THINK_CLOSE_RE.search(head)
    if close and not _THINK_OPEN_RE.search(head, 0, close.start()):
        return bool(head[: close.start()].strip())
    return False


def final_statement(text: str) -> str | None:
    """The answer named by the last explicit statement ("the final answer is X") in `text`.

    Returns the rest of that line (or the next non-empty line when the statement ends its line),
    with a `\\boxed{}` inside it unwrapped; None when there is no statement.
    """
    matches = list(_STATEMENT_RE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]
    lines = rest.split("\n")
    candidate = lines[0].strip()
    if not candidate:
        candidate = next((line.strip() for line in lines[1:] if line.strip()), "")
    boxed = last_boxed(candidate)
    if boxed is not None:
        return boxed.strip()
    return candidate or None


def last_boxed(text: str) -> str | None:
    """Content of the last brace-balanced `\\boxed{...}` (or `\\fbox{...}`) in `text`.

    "Last" is by opening position, as before; closings come from one pass of brace matching (the
    closing of a brace is the one that pops it from a stack), so nested or unclosed boxes cost one
    scan in total instead of one scan each.
    """
    content_starts = [match.end() for match in _BOXED_RE.finditer(text)]
    if not content_starts:
        return None
    wanted = set(content_starts)
    stack: list[int] = []
    closing: dict[int, int] = {}
    for brace in _BRACE_RE.finditer(text, content_starts[0] - 1):
        if brace.group() == "{":
            stack.append(brace.end())
        elif stack:
            opened = stack.pop()
            if opened in wanted:
                closing[opened] = brace.start()
    for start in reversed(content_starts):
        if start in closing:
            return text[start : closing[start]]
    return None


def _box_spans(text: str) -> list[tuple[int, int, int, int]]:
    """`(start, content_start, content_end, end)` of every outermost complete `\\boxed{...}`, in order.

    One pass of brace matching as in `last_boxed`; a box inside another box is part of it.
    """
    content_starts = [(match.start(), match.end()) for match in _BOXED_RE.finditer(text)]
    if not content_starts:
        return []
    wanted = {content_start: start for start, content_start in content_starts}
    stack: list[int] = []
    spans: list[tuple[int, int, int, int]] = []
    for brace in _BRACE_RE.finditer(text, content_starts[0][1] - 1):
        if brace.group() == "{":
            stack.append(brace.end())
        elif stack:
            opened = stack.pop()
            if opened in wanted:
                spans.append((wanted[opened], opened, brace.start(), brace.end()))
    spans.sort()
    outermost: list[tuple[int, int, int, int]] = []
    for span in spans:
        if not outermost or span[0] >= outermost[-1][3]:
            outermost.append(span)
    return outermost


class Commitment(NamedTuple):
    """One answer a response commits to: its text and its form ("answer_tag", "final_statement",
    "boxed"), at `position` in the reasoning-free text."""

    text: str
    source: str
    position: int


def _statement_answers(text: str, offset: int) -> list[Commitment]:
    """Statements and boxes of a tag-free `text`, in order.

    A statement's answer runs to the end of its line (or is the next non-empty line when the
    statement ends its line) and stops at the next statement or box, so "The answer is A. The
    answer is B." states A and B and "The answer is A. So \\boxed{B}" states A and B; every box
    is a commitment of its own ("The answer is \\boxed{B}" states B once).
    """
    found: list[Commitment] = []
    boxes = _box_spans(text)
    box_starts = [span[0] for span in boxes]
    statements = list(_STATEMENT_RE.finditer(text))
    for index, match in enumerate(statements):
        stop = statements[index + 1].start() if index + 1 < len(statements) else len(text)
        begin = match.end()
        line_end = text.find("\n", begin, stop)
        if line_end == -1:
            line_end = stop
        if not text[begin:line_end].strip():  # "Answer:\nB": the answer is on the next non-empty line
            begin = line_end
            while begin < stop and text[begin].isspace():
                begin += 1
            line_end = text.find("\n", begin, stop)
            if line_end == -1:
                line_end = stop
        box_at = bisect.bisect_left(box_starts, begin)
        if box_at < len(box_starts) and box_starts[box_at] < line_end:
            line_end = box_starts[box_at]  # the box is its own commitment
        candidate = text[begin:line_end].strip(" \t\r\n$*:：")
        if candidate:
            found.append(Commitment(candidate, "final_statement", offset + match.start()))
    for start, content_start, content_end, _ in boxes:
        content = text[content_start:content_end].strip()
        if content:
            found.append(Commitment(content, "boxed", offset + start))
    found.sort(key=lambda commitment: commitment.position)
    return found


def committed_answers(body: str) -> list[Commitment]:
    """Every answer that a reasoning-free `body` commits to, in order of position.

    Each non-empty `<answer>` tag is one commitment (its content), unless it holds statements or
    boxes of its own, which are then its commitments ("<answer>\\boxed{A} \\boxed{B}</answer>"
    commits to A and B). Outside the tags, every statement ("the answer is X", "Answer: X") and
    every `\\boxed{}` not inside a statement's answer is one. Drafts in reasoning blocks are not
    in `body` and do not count.
    """
    found: list[Commitment] = []
    position = 0
    for start, content_start, content_end, end in _blocks(body, _ANSWER_OPEN_RE, _ANSWER_CLOSE_RE):
        found.extend(_statement_answers(body[position:start], position))
        content = body[content_start:content_end]
        inner = _statement_answers(content, content_start)
        if inner:
            found.extend(inner)
        elif content.strip():
            found.append(Commitment(content.strip(), "answer_tag", content_start))
        position = end
    found.extend(_statement_answers(body[position:], position))
    return found


@dataclass(frozen=True)
class ExtractedAnswer:
    """The part of a response that states its answer.

    Attributes:
        text: the answer text, or None when the response states none.
        source: where it came from: "answer_tag", "final_statement", "boxed", "text" (the whole
            response without reasoning) or "none".
        ambiguous: True when the response gives several `<answer>` tags with different text (a
            hedge seen without knowing the task; `read` decides with the task's own reading).
        candidates: every answer the response commits to (`committed_answers`), in order.
    """

    text: str | None
    source: str
    ambiguous: bool = False
    candidates: tuple[Commitment, ...] = ()

    @property
    def from_tag(self) -> bool:
        return self.source == "answer_tag" and not self.ambiguous

    def read(
        self,
        reader: Callable[[str], _Value | None],
        same: Callable[[_Value, _Value], bool | None] = lambda a, b: a == b,
    ) -> _Value | None:
        """The one value the response commits to, as `reader` reads an answer text; None otherwise.

        `reader(self.text)` is the value. Every commitment that `reader` can read must be `same`
        as it, otherwise the response states two different answers and has none; a statement or
        box `reader` cannot read is prose and is skipped, but a whole `<answer>` tag must read
        (two tags, one of them not an answer, are a hedge). The same answer stated twice ("\\boxed{3}
        \\boxed{3.0}", "<answer>B</answer> The answer is B because ...") keeps its value. `same`
        may return None for "cannot tell", which counts as agreement.
        """
        if self.text is None:
            return None
        value = reader(self.text)
        if value is None:
            return None
        for candidate in self.candidates:
            other = reader(candidate.text)
            if other is None:
                if candidate.source == "answer_tag":
                    return None
                continue
            if same(value, other) is False:
                return None
        return value


def extract_answer(response: str) -> ExtractedAnswer:
    """Find the stated answer: `<answer>` tag, then a final statement, then `\\boxed{}`, then the text.

    Tags inside reasoning are drafts and are ignored. Several tags with different contents make the
    answer `ambiguous` (a hedge); every commitment (tags, statements, boxes) is listed in
    `candidates`, so a task can refuse two different answers (`ExtractedAnswer.read`). Only the
    last `MAX_SCORED_CHARS` characters of the reasoning-free response are read (bounded time on
    any input), in their `reading_form` (invisible characters removed, fullwidth forms made plain).
    """
    body = reading_form(scored_tail(strip_think(response)))
    candidates = tuple(committed_answers(body))
    tags = [content for content in answer_tag_contents(body) if content]
    if len({" ".join(content.split()) for content in tags}) > 1:
        return ExtractedAnswer(tags[-1], "answer_tag", ambiguous=True, candidates=candidates)
    if tags:
        return ExtractedAnswer(tags[-1], "answer_tag", candidates=candidates)
    statement = final_statement(body)
    if statement:
        return ExtractedAnswer(statement, "final_statement", candidates=candidates)
    boxed = last_boxed(body)
    if boxed is not None and boxed.strip():
        return ExtractedAnswer(boxed.strip(), "boxed", candidates=candidates)
    if body.strip():
        return ExtractedAnswer(body.strip(), "text", candidates=candidates)
    return ExtractedAnswer(None, "none", candidates=candidates)


def parse_ground_truth(ground_truth: Any) -> str:
    """The answer inside a benchmark ground truth.

    Handles `<answer>X</answer>` (the last tag wins), bare strings, `$...$` math, and the Charades-STA
    quirk `<think>{json}</think><[PLHD...]>` where the answer sits in the reasoning block followed by a
    placeholder token.
    """
    text = ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth)
    tags = answer_tag_contents(text)
    if tags:
        return tags[-1]
    if _THINK_CLOSE_RE.search(text):
        outside = _PLACEHOLDER_RE.sub("", strip_think(text)).strip()
        if outside:
            return outside
        blocks = _blocks(text, _THINK_OPEN_RE, _THINK_CLOSE_RE)
        if blocks:
            return text[blocks[-1][1] : blocks[-1][2]].strip()
    text = text.strip()
    dollar = re.fullmatch(r"\$\$?(.+?)\$?\$", text, re.DOTALL)
    return dollar.group(1).strip() if dollar else text


# --------------------------------------------------------------------------- short-answer cleaning

_TEXT_WRAPPER_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s*+\{([^{}]*)\}")


def clean_short_answer(text: str) -> str:
    """Strip presentation from a short answer: `\\boxed{}`, `$`, `\\text{}`, markdown, quotes, end punctuation."""
    value = text.strip()
    boxed = last_boxed(value)
    if boxed is not None and value.startswith(("\\boxed", "$\\boxed", "\\fbox", "$\\fbox")):
        value = boxed
    value = _TEXT_WRAPPER_RE.sub(r"\1", value)
    value = value.replace("$", "").replace("**", "").replace("__", "").replace("`", "")
    value = value.strip().strip("\"'“”‘’「」").strip()
    return value.rstrip(".。!！;；,，").strip()


def normalize_text(text: str) -> str:
    """NFKC, case-folded, whitespace-collapsed text (for label and option-text comparison)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())
