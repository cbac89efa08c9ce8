"""Make PyPI's torchvision import next to a CPU-only torch build (this project's CI machine).

Why: PyPI torchvision wheels carry CUDA-only C++ ops. Next to ``torch+cpu`` the ops library fails
to load and ``import torchvision`` dies in ``torchvision._meta_registrations`` with
"operator torchvision::nms does not exist". transformers' Qwen-VL video processors need
torchvision, so we define the two op *schemas* (no kernels: ``nms`` stays unusable, nothing
in this project calls it) right before that module runs.

This is environment set-up, never library code. ``python tools/torchvision_cpu_hook.py install``
writes a ``.pth`` file into the active environment's site-packages only when torchvision's ops
really fail to load; on a machine with a matching torch/torchvision pair it does nothing.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "easyvideor1_torchvision_cpu_hook.pth"
MODULE_NAME = "_easyvideor1_torchvision_hook"

# The module that the .pth file imports at interpreter start. It only installs a meta-path
# finder (cheap: no torch import); the schemas are defined lazily when torchvision is imported.
HOOK_SOURCE = '''"""Installed by easyvideor1 tools/torchvision_cpu_hook.py; see that file for why."""
import importlib.abc
import sys

_TARGET = "torchvision._meta_registrations"
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_libs = []


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        try:
            import torch
            import torchvision.extension as ext

            if not ext._has_ops():
                lib = torch.library.Library("torchvision", "DEF")
                for schema in _SCHEMAS:
                    lib.define(schema)
                _libs.append(lib)  # keep the registration alive
        except Exception:  # never break an import because of this hook
            pass
        return None  # let the normal finders load the module


if not any(type(f).__name__ == "_Finder" and getattr(f, "__module__", "") == __name__ for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
'''


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _torchvision_imports() -> tuple[bool, str]:
    proc = subprocess.run(
        [sys.executable, "-c", "import torchvision, torchvision.transforms.v2"],
        capture_output=True,
        text=True,
    )
    return proc.returncode == 0, proc.stderr.strip().splitlines()[-1:] and proc.stderr.strip().splitlines()[
        -1
    ] or ""


def install() -> int:
    site = _site_packages()
    pth, module = site / PTH_NAME, site / f"{MODULE_NAME}.py"
    ok, err = _torchvision_imports()
    if ok:
        print("torchvision imports cleanly: no hook needed")
        return 0
    if "torchvision::nms does not exist" not in err:
        print(f"torchvision fails to import for another reason, hook not installed: {err}", file=sys.stderr)
        return 1
    module.write_text(HOOK_SOURCE)
    pth.write_text(f"import {MODULE_NAME}\n")
    ok, err = _torchvision_imports()
    if not ok:
        print(f"hook installed but torchvision still fails: {err}", file=sys.stderr)
        return 1
    print(f"torchvision CPU hook installed in {site}")
    return 0


def uninstall() -> int:
    site = _site_packages()
    for p in (site / PTH_NAME, site / f"{MODULE_NAME}.py"):
        p.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    action = sys.argv[1] if len(sys.argv) > 1 else "install"
    sys.exit(install() if action == "install" else uninstall())
