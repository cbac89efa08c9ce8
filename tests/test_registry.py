"""One registry implementation behind everything users extend (issue 20, item 6).

Estimators, losses, KL estimators, loss aggregations, filters, reward tasks, benchmarks and model
families all answer to the same spellings, reject a taken name the same way and say "did you mean"
the same way; plug-in files register through the same loader; group estimators are declared by
the registry, and the config reads that declaration.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from easyvideor1.algorithms._registry import (
    ADVANTAGE_ESTIMATORS,
    FILTERS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    is_group_estimator,
)
from easyvideor1.evaluation.registry import BENCHMARKS
from easyvideor1.models.families.registry import FAMILIES
from easyvideor1.registry import PluginFileError, Registry, UnknownNameError, load_plugin_file, normalize_name
from easyvideor1.rewards.registry import TASKS

# (registry, a built-in name, another spelling of it)
REGISTRIES = {
    "estimators": (ADVANTAGE_ESTIMATORS, "dr_grpo", " Dr-GRPO "),
    "losses": (POLICY_LOSSES, "gspo_token", "GSPO.token"),
    "kl": (KL_ESTIMATORS, "low_var_kl", "low-var-kl"),
    "aggregations": (LOSS_AGGREGATIONS, "token-mean", "TOKEN_MEAN"),
    "filters": (FILTERS, "std", "Std"),
    "tasks": (TASKS, "multiple choice", "Multiple-Choice"),
    "benchmarks": (BENCHMARKS, "videomme", "VideoMME"),
    "families": (FAMILIES, "qwen3_vl", "Qwen3-VL"),
}


@pytest.mark.parametrize("which", list(REGISTRIES))
def test_every_registry_spells_names_alike(which):
    registry, name, spelling = REGISTRIES[which]
    assert isinstance(registry, Registry)
    assert spelling in registry and registry.get(spelling) is registry.get(name)
    assert registry.canonical(spelling) == registry.canonical(name)


@pytest.mark.parametrize("which", list(REGISTRIES))
def test_every_registry_says_did_you_mean_in_one_line(which):
    registry, name, _ = REGISTRIES[which]
    typo = name[:-1] + ("x" if name[-1] != "x" else "y")
    with pytest.raises(UnknownNameError) as e:
        registry.get(typo)
    message = str(e.value)
    assert "\n" not in message and "did you mean" in message and "known:" in message, message
    assert isinstance(e.value, ValueError)


def test_normalisation_is_one_function():
    assert normalize_name("  Dr--GRPO ") == normalize_name("dr_grpo") == normalize_name("dr.grpo")
    assert normalize_name("multiple choice") == "multiple_choice"


def test_a_taken_name_is_refused_unless_overridden():
    registry: Registry = Registry("widget")

    @registry.register("spin", aliases=("twirl",))
    def spin():
        return 1

    with pytest.raises(ValueError, match="widget name 'twirl' is already registered"):
        registry.register("Twirl", lambda: 2)
    registry.register("spin", lambda: 3, override=True)
    assert registry.get("twirl")() == 3
    registry.register("spin", registry.get("spin"), override=True)  # the same definition again: fine


def test_declared_builtins_are_named_without_importing_them(tmp_path):
    """`declare` lists a built-in by name; its module is imported on the first `get` only."""
    (tmp_path / "heavy_widgets.py").write_text("IMPORTED = True\ndef wobble():\n    return 'w'\n")
    code = textwrap.dedent(
        """
        import sys
        from easyvideor1.registry import Registry
        r = Registry("widget")
        r.declare("wobble", "heavy_widgets:wobble", group=True)
        assert "wobble" in r and r.metadata("wobble")["group"] is True
        assert "heavy_widgets" not in sys.modules
        assert r.get("Wobble")() == "w" and "heavy_widgets" in sys.modules
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]


def _estimators(*named: tuple[str, bool]) -> str:
    """A plug-in file registering a do-nothing estimator per ``(name, group)``."""
    lines = ["from easyvideor1.algorithms import register_advantage"]
    for k, (name, group) in enumerate(named):
        lines += [
            f"@register_advantage({name!r}, group={group})",
            f"def estimator_{k}(scores, group_ids, response_mask, **_):",
            "    return 0 * response_mask, 0 * response_mask",
        ]
    return "\n".join(lines) + "\n"


def test_plugin_files_for_a_task_and_an_estimator(tmp_path):
    task = tmp_path / "my_task.py"
    task.write_text(
        textwrap.dedent(
            """
            from easyvideor1.rewards.registry import register_task

            @register_task("echo-check", aliases=("echo",))
            def echo(sample):
                return None  # registration is what is tested here
            """
        )
    )
    estimator = tmp_path / "my_estimator.py"
    estimator.write_text(_estimators(("zero-group", True)))
    load_plugin_file(str(task))
    load_plugin_file(str(estimator))
    assert TASKS.canonical("ECHO") == TASKS.canonical("echo_check")
    assert is_group_estimator("Zero_Group") and not is_group_estimator("reinforce_plus_plus")
    broken = tmp_path / "broken.py"
    broken.write_text("def oops(:\n")
    with pytest.raises(PluginFileError, match="broken.py"):
        load_plugin_file(str(broken))
    with pytest.raises(FileNotFoundError, match="nowhere.py"):
        load_plugin_file(str(tmp_path / "nowhere.py"))


def test_group_estimators_come_from_the_registry_and_drive_the_config(tmp_path):
    """A user's group estimator with ``rollout.n=1`` is refused, as ``grpo`` is; a non-group one is
    accepted: the config asks the registry, not a tuple."""
    plugin = tmp_path / "est.py"
    plugin.write_text(_estimators(("my-group", True), ("my-single", False)))
    from easyvideor1.config import ConfigError, RunConfig, load_config

    def build(estimator):
        return load_config(
            RunConfig,
            None,
            [f"algorithm.plugin_files=[{plugin}]", f"algorithm.adv_estimator={estimator}", "rollout.n=1"],
        )

    for estimator in ("grpo", "my-group"):
        with pytest.raises(ConfigError, match="rollout.n"):
            build(estimator)
    assert build("my-single").algorithm.adv_estimator == "my-single"
