"""The manual: its generated references are complete and current, the site builds strict, and the
commands on the getting-started page run as written (tiny model, synthetic videos)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import docs_reference  # noqa: E402


def test_every_configuration_key_has_a_description():
    assert docs_reference.missing_docs() == []


def test_the_generated_references_are_current():
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "docs_reference.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    for key in (
        "trainer.eval.every",
        "distributed.sequence_parallel_size",
        "reward.judge.url",
        "algorithm.adv_std_scope",
    ):
        assert f"| `{key}` |" in page
    errors = (ROOT / "docs" / "reference" / "errors.md").read_text()
    assert "distributed.sequence_parallel_size=… must divide the number of ranks" in errors


def test_the_site_builds_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").exists()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "register_task" in api and "compute_advantages" in api  # rendered from the docstrings


def test_the_readme_is_short_and_links_into_the_docs():
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 150
    for page in re.findall(r"\]\((docs/[^)#]+)", "\n".join(readme)):
        assert (ROOT / page).exists(), page


@pytest.mark.slow
def test_the_getting_started_commands_run(tmp_path):
    page = (ROOT / "docs" / "getting-started.md").read_text()
    after = page.split("<!-- getting-started:", 1)[1]
    commands = [
        line.strip()
        for block in re.findall(r"```bash\n(.*?)```", after, re.S)
        for line in block.splitlines()
        if line.strip().startswith("easyvideor1 ")
    ]
    assert len(commands) == 5
    readme = (ROOT / "README.md").read_text()
    assert all(command in readme for command in commands)  # the README's quickstart is these lines
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for command in commands:
        args = [sys.executable, "-m", "easyvideor1", *shlex.split(command)[1:]]
        r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, f"{command}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
    assert (tmp_path / "runs" / "train" / "metrics.jsonl").exists()
    assert (tmp_path / "runs" / "eval" / "results.json").exists()
