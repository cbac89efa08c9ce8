"""How the command line ends on an error: a user error (a key, a path, a flag) is one line and
exit 2; anything else is a bug and keeps its traceback (exit 1); ``--debug`` and
``EASYVIDEOR1_DEBUG=1`` show a user error's traceback too."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from easyvideor1.cli import evaluate, main

BAD_KEY = ["eval", "--list", "eval.engine=sglang"]
BAD_KEY_LINE = "easyvideor1 eval: eval.engine: 'sglang' is not one of hf, vllm"


@pytest.fixture
def no_debug_env(monkeypatch):
    monkeypatch.delenv("EASYVIDEOR1_DEBUG", raising=False)


def test_a_user_error_is_one_line_and_exit_2(capsys, no_debug_env):
    assert main(BAD_KEY) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [BAD_KEY_LINE]


def test_a_missing_config_file_is_one_line(capsys, no_debug_env, tmp_path):
    assert main(["eval", "--list", f"config={tmp_path / 'none.yaml'}"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("easyvideor1 eval: ") and "none.yaml" in line


def test_a_programming_error_keeps_its_traceback(capsys, monkeypatch, no_debug_env):
    def compare(args, extra):
        return list(zip([1, 2], [1], strict=True))  # a bug: the lengths were meant to match

    monkeypatch.setattr(evaluate, "cmd_eval_compare", compare)
    assert main(["eval", "compare", "a", "b"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "in compare" in err and err.rstrip().endswith(
        "ValueError: zip() argument 2 is shorter than argument 1"
    )


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_a_user_errors_traceback(capsys, monkeypatch, no_debug_env, how):
    if how == "flag":
        argv = ["--debug", *BAD_KEY]
    else:
        argv = BAD_KEY
        monkeypatch.setenv("EASYVIDEOR1_DEBUG", "1")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "EvalConfigError" in err
    assert err.splitlines()[-1] == BAD_KEY_LINE


def test_debug_flag_before_eval_compare(capsys, monkeypatch, no_debug_env):
    seen = []
    monkeypatch.setattr(evaluate, "cmd_eval_compare", lambda args, extra: seen.append(args.run_a) or 0)
    assert main(["--debug", "eval", "compare", "a", "b"]) == 0 and seen == ["a"]


def test_the_installed_command_exits_2_with_one_line():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("EASYVIDEOR1_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "easyvideor1", *BAD_KEY], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2 and done.stderr.splitlines() == [BAD_KEY_LINE]


def test_a_renamed_key_is_one_warning_line_naming_the_new_key(no_debug_env):
    r = subprocess.run(
        [sys.executable, "-m", "easyvideor1", "eval", "--list", "algorithm.clip_ratio_low=0.1"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        "easyvideor1 eval: warning: algorithm.clip_ratio_low is deprecated: use "
        "algorithm.loss_options.clip_ratio_low"
    ]
