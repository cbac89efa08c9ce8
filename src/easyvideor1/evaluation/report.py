"""Run-level outputs: ``results.json`` over all benchmarks and a Markdown table."""

from __future__ import annotations

import json
import os
from typing import Any


def write_summary(results: dict[str, dict[str, Any]], out_dir: str) -> str:
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    lines = [
        "| benchmark | score | samples | failures | extraction failures | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {100 * r['score']:.2f} | {r['evaluated']}/{r['samples']} | {r['failures']} | "
            f"{r['extraction_failures']} | {r['seconds']} |"
        )
    path = os.path.join(out_dir, "results.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path
