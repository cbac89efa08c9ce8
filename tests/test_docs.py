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


# keys kept only to refuse a setting that moved, naming where it went (setting one is an error)
REMOVED = {
    "reward.overlong_buffer": "algorithm.overlong",
    "reward.overlong_max_length": "algorithm.overlong",
    "reward.overlong_penalty_factor": "algorithm.overlong",
}


def _names_read(source: Path) -> set[str]:
    """The names the package reads: attributes loaded, ``getattr(x, "name")``, parameters that
    receive options (``**options`` into a loss), and string constants (``"algorithm.plugin_files"``
    selected by dotted key), leaving out what a config class's own checks read (``__post_init__``,
    ``check*`` and ``validate`` methods of the classes in the configuration tree)."""
    import ast

    from easyvideor1.config import RunConfig

    config_classes = {cls.__name__ for _, _, cls, _ in docs_reference.config_fields(RunConfig)}
    config_classes |= {cls.__name__ for *_, cls, _, _ in docs_reference.loss_options()}
    found: set[str] = set()

    def visit(node: ast.AST, in_config_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name in config_classes)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and in_config_class:
                if child.name == "__post_init__" or child.name.startswith(("check", "_check", "validate")):
                    continue  # a key checked is not a key used
            if isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Load):
                found.add(child.attr)
            elif isinstance(child, ast.arg):
                found.add(child.arg)
            elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                found.add(child.value)
            visit(child, in_config_class and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    for path in source.rglob("*.py"):
        visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def test_every_documented_key_is_read_outside_its_own_checks():
    """Each key of the configuration reference is read somewhere in the package besides the
    checks of the class that defines it (by its name, ``getattr`` or its dotted key). The scan
    cannot tell two objects' attributes of one name apart, so it proves a key unused, never used:
    each sampling key's effect on the engines is tested in ``tests/rollout/test_sampling.py``, and
    ``rollout.min_new_tokens`` in training in ``tests/trainer/test_build.py``."""
    read = _names_read(ROOT / "src" / "easyvideor1")
    unused = [
        key
        for key in docs_reference.documented_keys()
        if key not in REMOVED and key.rsplit(".", 1)[-1] not in read and key not in read
    ]
    assert unused == [], "documented keys that nothing reads: use them or remove them (with a deprecation)"


@pytest.mark.parametrize("key", sorted(REMOVED))
def test_a_removed_key_is_refused_naming_its_replacement(key):
    from easyvideor1.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=REMOVED[key]):
        load_config(overrides=[f"{key}=1"])


def test_the_sampling_keys_of_every_section_are_the_engines_sampling_keys():
    """``rollout``, ``eval`` (and ``filter``'s settings) sample with one ``SamplingConfig``; its keys
    are the ones ``tests/rollout/test_sampling.py`` proves reach both engines."""
    from easyvideor1.rollout.sampling import SAMPLING_KEYS

    keys = docs_reference.documented_keys()
    for section in ("rollout", "eval"):
        assert {k.split(".", 1)[1] for k in keys if k.startswith(section + ".")} >= set(SAMPLING_KEYS)


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
