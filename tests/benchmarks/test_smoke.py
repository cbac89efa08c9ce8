"""Every ``benchmarks/*.py`` runs in its ``--smoke`` mode (tiny sizes) as a real subprocess: it
finishes and its last stdout line is its JSON figures with the keys it declares (``RESULT_KEYS``),
so a benchmark cannot rot between ``make bench`` runs (``lora_memory``'s figures are also checked
exactly). Modules named ``_*.py`` are helpers of
other benchmarks (``make bench`` skips them too)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))
# smoke runs measured above ~20 s on a 2-core machine (torch start-ups, torchrun, vLLM)
SLOW = {
    "data_path", "decode_memory", "distributed", "eval_pipeline", "lora_memory", "rollout", "threads_under_load",
    "train_step",
}  # fmt: skip


def result_keys(script: Path) -> list[str]:
    """The script's declared ``RESULT_KEYS``, read without importing it; ``train_step.py`` adds
    its helper's ``REALISTIC_KEYS`` (a starred name)."""
    tree = ast.parse(script.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "RESULT_KEYS" for t in node.targets
        ):
            keys = []
            for element in node.value.elts:
                if isinstance(element, ast.Starred):  # *NAME from a helper module next to it
                    keys += helper_keys(element.value.id)
                else:
                    keys.append(ast.literal_eval(element))
            return keys
    raise AssertionError(f"{script.name} declares no RESULT_KEYS (the keys of its JSON line)")


def helper_keys(name: str) -> list[str]:
    for helper in (ROOT / "benchmarks").glob("_*.py"):
        for node in ast.parse(helper.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                return list(ast.literal_eval(node.value))
    raise AssertionError(f"no benchmarks/_*.py defines {name}")


@pytest.mark.parametrize(
    "script",
    [pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem in SLOW else []) for p in SCRIPTS],
)
def test_benchmark_smoke_mode_finishes_and_prints_its_json_line(script: Path, tmp_path: Path) -> None:
    keys = result_keys(script)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert r.returncode == 0, (
        f"{script.name} --smoke exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    )
    last = r.stdout.strip().splitlines()[-1]
    figures = json.loads(last)
    assert isinstance(figures, dict), last
    assert list(figures) == keys, f"{script.name}: {sorted(figures)} != {sorted(keys)}"
    if script.stem in CHECKS:
        CHECKS[script.stem](figures, r.stdout)


def check_lora_memory(result: dict, out: str) -> None:
    """The smoke model's byte counts are the exact ones, and the two variants run the same model
    (LoRA's B starts at zero: the first losses are equal)."""
    import math

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import lora_memory

    full, lora = result["full"], result["lora"]
    model = lora_memory.build_model(lora_memory._args(["--smoke"]))
    linears = dict(model.named_modules())
    rank = int(lora_memory.SMOKE_SIZES[lora_memory.SMOKE_SIZES.index("--rank") + 1])
    adapters = sum(
        rank * (linears[n].in_features + linears[n].out_features) for n in lora_memory.lora_targets(model)
    )
    assert lora["trainable"] == adapters  # on every language-model linear layer, nothing else
    assert full["trainable"] == sum(p.numel() for p in model.parameters())
    assert lora["params"] == full["params"] + adapters
    # AdamW: exp_avg and exp_avg_sq for every float32 value that got a gradient (a text batch
    # leaves the vision tower without one), plus a one-value step count per tensor
    for r in (full, lora):
        tensors = r["optimizer_state_bytes"] - 2 * r["grad_bytes"]
        assert 0 < tensors <= 4 * 1000, tensors
    assert lora["grad_bytes"] == 4 * lora["trainable"]
    assert full["loss"] == lora["loss"]  # the same function before the first update
    assert math.isfinite(full["loss"])
    assert 0 < lora["peak_step_bytes"] < full["peak_step_bytes"]
    assert result["optimizer_state_ratio"] > 20
    assert "AdamW state (MiB)" in out and "full / LoRA" in out


def check_plan_accuracy(result: dict, out: str) -> None:
    """Both passes of the smoke case, each with a positive, finite predicted and measured peak and
    transient (the error is printed, not held to a bound: the smoke case is too small to judge)."""
    import math

    assert [c["pass"] for c in result["cases"]] == ["logprobs", "update"]
    for case in result["cases"]:
        for key in ("predicted_gib", "measured_gib", "predicted_transient_gib", "measured_transient_gib"):
            assert math.isfinite(case[key]) and case[key] > 0, (key, case)
        assert case["size"] == "tiny" and case["params"] > 0 and case["prompt_tokens"] > 0
    for key in ("max_rel_error", "max_rel_error_transient"):
        assert math.isfinite(result[key]) and result[key] >= 0, result


# what a benchmark's figures must satisfy beyond their keys (its own test, on the same smoke run)
CHECKS = {"lora_memory": check_lora_memory, "plan_accuracy": check_plan_accuracy}


def test_every_benchmark_is_covered() -> None:
    # the glob is the list: a new benchmarks/*.py is run above without being named here
    assert {p.stem for p in SCRIPTS} >= {"eval_pipeline", "train_step", "rewards"}
    assert SLOW <= {p.stem for p in SCRIPTS}, SLOW - {p.stem for p in SCRIPTS}
