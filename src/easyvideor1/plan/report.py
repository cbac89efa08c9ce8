"""The plan as a readable table (``easyvideor1 plan``) or JSON (``--json``)."""

from __future__ import annotations

import json

from .verdict import Plan


def to_json(plan: Plan) -> str:
    return json.dumps(plan.to_json(), indent=2)


def table(plan: Plan) -> str:
    """Each phase's peak, verdict and largest parts; the KV cache; the fixes; the estimate."""
    d = plan.to_json()
    m, hw = d["model"], plan.hardware
    lines = [
        f"{m['name']} ({m['model_type']}, {m['parameters'] / 1e9:.3f}B parameters) on {hw.gpus} GPU(s) "
        f"of {hw.memory_gib:g} GiB",
        "",
        f"{'phase':<15}{'peak GiB':>10}{'margin':>9}  verdict   largest parts (GiB)",
    ]
    for p in d["phases"]:
        parts = sorted(p["parts_gib"].items(), key=lambda kv: -kv[1])[:4]
        verdict = "fits" if p["fits"] else "NO FIT"
        lines.append(
            f"{p['name']:<15}{p['peak_gib']:>10.1f}{p['margin_gib']:>+9.1f}  {verdict:<8}  "
            + ", ".join(f"{k} {v:.1f}" for k, v in parts)
        )
        lines.append(f"{'':<15}planned for {p['detail']}")
        if "reason" in p:
            lines.append(f"{'':<15}{p['reason']}")
        for fix in p.get("fixes", []):
            lines.append(f"{'':<15}fits with {fix['key']}={fix['value']} (peak {fix['peak_gib']:.1f} GiB)")
    kv = d["kv_cache"]
    if kv:
        lines += [
            "",
            f"KV cache: {kv['gib']:.1f} GiB = {kv['tokens']:,} tokens ({kv['bytes_per_token']:,} bytes each); "
            f"{kv['groups_at_once']} group(s) of prompt + n responses ({kv['group_tokens']:,} tokens) at once",
        ]
    for note in d["notes"]:
        lines.append(f"note: {note}")
    e = d["estimate"]
    lines += ["", f"Time per step ({e['label']}): {e['step_seconds']:,.0f} s"]
    for c in e["phases"]:
        moved = f", {c['bytes_moved'] / 1e9:,.1f} GB moved" if "bytes_moved" in c else ""
        lines.append(f"  {c['name']:<15}{c['tflops']:>12,.0f} TFLOP {c['seconds']:>9,.1f} s{moved}")
    lines.append("assuming: " + "; ".join(e["assumptions"]))
    return "\n".join(lines)
