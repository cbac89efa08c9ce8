"""``OUT/report.html``: every sample of a run in one self-contained static page.

The rows (prompt, response, answer, extracted answer, score details, verdict, breakdown labels, a
thumbnail strip) are embedded as JSON and paged, filtered and searched client-side by plain JS
(``report_page.py``): no server, no network, usable at 10,000 samples. Thumbnails are made by the
loader processes from frames they load anyway (``thumbs.jsonl`` beside ``predictions.jsonl``), so a
report never decodes a video; a sample whose frames were never loaded (failures, ``score``) has none.
The total thumbnail size is capped (``THUMB_BUDGET``) so the page stays small enough to open.

``eval-compare`` reads two reports' embedded rows (``read_payload``) and writes the same page.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import time
from typing import Any

from ..errors import UserError
from ..media.image import load_image
from ..outdir import write_text_atomic
from .predictions import iter_rows

THUMB_FRAMES = 4  # frames per strip
THUMB_HEIGHT = 56  # pixels
THUMB_BUDGET = 24 << 20  # characters of thumbnail data URIs per page
VERDICTS = ("correct", "wrong", "extraction_failure", "failure", "not_scored", "missing")
_DATA_ID = "report-data"
# fields of a row that are shown on their own, not among the score details
_SHOWN = {
    "sample_id", "index", "settings", "prompt_sha", "failed", "error", "prediction", "accuracy",
    "extracted", "scoring", "output_tokens", "truncated", "scored", "not_scored_reason", "episode",
}  # fmt: skip


def thumbnail_strip(videos: list, images: list) -> str | None:
    """A small JPEG data URI of a few evenly spaced frames of the first video (or the first image)."""
    from PIL import Image

    frames = []
    if videos:
        data = videos[0].frames
        n = int(data.shape[0])
        picks = (
            sorted({round(k * (n - 1) / max(1, THUMB_FRAMES - 1)) for k in range(THUMB_FRAMES)}) if n else []
        )
        frames = [Image.fromarray(data[k].numpy()) for k in picks]
    elif images:
        frames = [images[0] if isinstance(images[0], Image.Image) else load_image(images[0], None)]
    if not frames:
        return None
    scaled = [
        f.convert("RGB").resize((max(1, round(f.width * THUMB_HEIGHT / f.height)), THUMB_HEIGHT))
        for f in frames
    ]
    strip = Image.new("RGB", (sum(f.width for f in scaled) + 2 * (len(scaled) - 1), THUMB_HEIGHT), "white")
    x = 0
    for f in scaled:
        strip.paste(f, (x, 0))
        x += f.width + 2
    buf = io.BytesIO()
    strip.save(buf, format="JPEG", quality=60)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def read_thumbs(path: str) -> dict[str, str]:
    """``thumbs.jsonl``: sample id -> data URI (a line cut by a kill is skipped)."""
    if not os.path.exists(path):
        return {}
    return {r["sample_id"]: r["thumb"] for r in iter_rows(path) if r and isinstance(r.get("thumb"), str)}


def verdict(row: dict | None) -> str:
    """One word for a sample: correct (score >= 0.5; 1 for exact-match tasks), wrong, extraction
    failure (no answer could be read), failure (media or request failed), not scored, missing."""
    if row is None:
        return "missing"
    if row.get("failed"):
        return "failure"
    if row.get("scored") is False:
        return "not_scored"
    if row.get("extracted") is None:
        return "extraction_failure"
    return "correct" if float(row.get("accuracy") or 0.0) >= 0.5 else "wrong"


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None), list, dict)) else str(value)


def sample_rows(inputs, rows: dict[str, dict], thumbs: dict[str, str]) -> list[dict[str, Any]]:
    """One report row per sample of ``inputs`` (a BenchmarkInputs), rows already re-scored."""
    from .rows import prompt_sha
    from .spec_file import field_label

    out = []
    for i, (rec, sid, prompt) in enumerate(zip(inputs.records, inputs.ids, inputs.prompts, strict=True)):
        row = rows.get(sid)
        if row is not None and row.get("prompt_sha") != prompt_sha(prompt):
            row = None  # made for another prompt: not this sample's result
        details = {k: _jsonable(v) for k, v in (row or {}).items() if k not in _SHOWN}
        for key in ("output_tokens", "truncated", "not_scored_reason"):
            if row and row.get(key) is not None:
                details[key] = row[key]
        out.append(
            {
                "b": inputs.spec.name,
                "id": sid,
                "i": i,
                "t": rec.problem_type or "unknown",
                "g": {f: field_label(rec, f) for f in inputs.spec.breakdown_fields if f != "problem_type"},
                "v": verdict(row),
                "s": None if row is None or row.get("scored") is False else float(row.get("accuracy") or 0.0),
                "q": prompt,
                "r": None if row is None else row.get("prediction"),
                "e": None if row is None else row.get("error"),
                "a": rec.answer,
                "o": rec.options or [],
                "x": None if row is None else _jsonable(row.get("extracted")),
                "d": details,
                "m": (rec.videos or rec.images or [""])[0],
                "th": thumbs.get(sid),
                # an episode (tools): each policy turn and its calls, with the frames they returned
                "tt": None if row is None or not row.get("episode") else row["episode"]["turns"],
            }
        )
    return out


def _share_thumbnails(rows: list[dict]) -> tuple[list[str], int]:
    """Replace each row's thumbnail by an index into one list of distinct thumbnails (the questions
    of one video share its strip), dropping those past the budget; returns (list, dropped rows)."""
    index: dict[str, int] = {}
    used = dropped = 0
    for row in rows:
        th = row.get("th")
        if not th:
            continue
        if th not in index:
            if used + len(th) > THUMB_BUDGET:
                row["th"] = None
                dropped += 1
                continue
            index[th] = len(index)
            used += len(th)
        row["th"] = index[th]
    return list(index), dropped


def write_page(path: str, title: str, benchmarks: dict[str, dict], rows: list[dict], **extra: Any) -> str:
    """Write the self-contained page: summary, filters, pages of samples."""
    from .report_page import PAGE

    thumbs, dropped = _share_thumbnails(rows)
    payload = {
        "thumbs": thumbs,
        "title": title,
        "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "benchmarks": benchmarks,
        "verdicts": list(VERDICTS),
        "thumbs_dropped": dropped,
        "rows": rows,
        **extra,
    }
    # "</" inside a <script> would end it early; JSON allows the escaped form "<\/"
    blob = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    page = PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", blob)
    write_text_atomic(path, page)
    return path


def read_payload(path: str) -> dict[str, Any]:
    """The rows and summary embedded in a report page (for ``eval-compare``)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no report page at {path} (written by `easyvideor1 eval` / `score`)")
    text = open(path, encoding="utf-8").read()
    m = re.search(rf'<script type="application/json" id="{_DATA_ID}">(.*?)</script>', text, re.S)
    if not m:
        raise UserError(f"{path}: no embedded report data (not a report.html of this tool?)")
    return json.loads(m.group(1))
