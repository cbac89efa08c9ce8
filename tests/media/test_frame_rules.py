"""The named frame rules: their registry, the settings each writes into cache keys, and the layering
(the rules live in ``media/``, which imports nothing from ``models/``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from easyvideor1.errors import ConfigError
from easyvideor1.media.frame_rules import FRAME_RULES, frame_rule
from easyvideor1.media.sampling import SamplingParams, frame_indices, video_frame_size
from easyvideor1.models.families import family_names, get_family

MEDIA = Path(__file__).resolve().parents[2] / "src" / "easyvideor1" / "media"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside a function, as absolute names."""
    package = "easyvideor1.media"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_media_imports_nothing_from_models():
    offenders = {
        f.name: sorted(m for m in _imported_modules(f) if m.startswith("easyvideor1.models"))
        for f in sorted(MEDIA.glob("*.py"))
    }
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def test_every_family_names_a_known_rule_for_its_factor():
    assert sorted(FRAME_RULES.names()) == ["glm4v", "internvl", "qwen"]
    for name in family_names():
        frames = get_family(name).frames
        assert frames.factor in frame_rule(frames.rule).factors, name
        params = frames.params(nframes=4)
        assert (params.rule, params.factor) == (frames.rule, frames.factor)


def test_settings_are_the_cache_keys_written_before_rules_were_named():
    # the qwen rule's dict has no "rule" key; another rule's has: entries cached before keep theirs
    assert SamplingParams(factor=32).to_dict() == {
        "factor": 32,
        "fps": 2.0,
        "nframes": None,
        "min_frames": 4,
        "max_frames": None,
        "min_pixels": 128 * 32 * 32,
        "max_pixels": None,
        "total_pixels": 128000 * 32 * 32 * 0.9,
        "video_start": None,
        "video_end": None,
        "allow_truncated": False,
    }
    glm = SamplingParams(factor=28, rule="glm4v").to_dict()
    assert glm["rule"] == "glm4v" and glm["fps"] == 2.0 and glm["min_frames"] is None
    assert (glm["min_pixels"], glm["total_pixels"]) == (112 * 112, 28 * 28 * 2 * 30000)
    internvl = SamplingParams(factor=28, rule="internvl", nframes=4).to_dict()
    assert internvl["rule"] == "internvl" and internvl["max_pixels"] == 448 * 448
    # a cache entry's stored parameters read back give the same key
    for params in (SamplingParams(factor=28, fps=1.0), SamplingParams(factor=28, rule="glm4v", nframes=4)):
        assert SamplingParams.from_dict(params.to_dict()).to_dict() == params.to_dict()


def test_rules_are_asked_through_the_params():
    qwen = SamplingParams(factor=28, nframes=4)
    assert frame_indices(qwen, 40, 10.0) == frame_rule("qwen").frame_indices(qwen, 40, 10.0)
    # GLM's nframes: evenly over the clip, as qwen-vl-utils, under GLM's own pixel bounds (the
    # qwen rule's per-frame minimum does not apply to it)
    glm = SamplingParams(factor=28, rule="glm4v", nframes=4, max_pixels=28 * 28 * 4)
    assert frame_indices(glm, 40, 10.0)[0] == frame_indices(qwen, 40, 10.0)[0] == [0, 13, 26, 39]
    assert video_frame_size(glm, 720, 1280, 4) == (28, 56)
    assert video_frame_size(SamplingParams(factor=28, rule="internvl", nframes=4), 720, 1280, 4) == (448, 448)


def test_bad_settings_are_config_errors_naming_the_rule():
    with pytest.raises(ConfigError, match="unknown frame rule 'glm5'"):
        SamplingParams(factor=28, rule="glm5")
    with pytest.raises(ConfigError, match="factor must be one of 28 for the glm4v frame rule"):
        SamplingParams(factor=32, rule="glm4v")
    with pytest.raises(ConfigError, match="give either fps or nframes"):
        SamplingParams(fps=1.0, nframes=4)
    with pytest.raises(ConfigError, match="InternVL samples a fixed number of frames"):
        SamplingParams(factor=28, rule="internvl").to_dict()
