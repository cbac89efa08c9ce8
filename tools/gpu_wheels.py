"""``make gpu-wheels``: the wheels the GPU check machine lacks, downloaded here into ``.whl/``.

That machine (Python 3.12, x86_64, torch 2.11 / CUDA 13, transformers 5.17) reaches no package
registry; whatever it lacks travels with the working tree, 64 MiB in all. This script

1. checks the pins of ``tools/gpu_wheels.txt`` against ``pyproject.toml`` (each pin must satisfy the
   project's own specifier) and checks that every project dependency is either pinned there or in
   the machine's image (``IMAGE``);
2. downloads each pin's Python 3.12 manylinux x86_64 wheel (``pip download --only-binary=:all:
   --no-deps``), or builds a pure-Python one for a pin marked ``build`` (sdist-only releases);
3. checks each wheel's own requirements are pinned or in the image, that pip installs them all
   from the folder alone for CPython 3.12 manylinux x86_64, and that the folder (plus the working
   tree that travels with it) fits in 64 MiB; any failure exits non-zero, loudly.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PINS = os.path.join(ROOT, "tools", "gpu_wheels.txt")
LIMIT_BYTES = 64 * 2**20  # what travels to the GPU machine: the working tree and carried folders
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
# The GPU machine's Python packages (the workplace's package list for its 'cuda' image, read
# 2026-11-17): anything named here is not carried.
IMAGE = set(
    canonicalize_name(n)
    for n in """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings
cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils
execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet
httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax
jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib
mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver
nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink
nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp
""".split()
)
# Requirement markers are evaluated for the GPU machine, not for this one
TARGET_ENV = {
    **default_environment(),
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
}


class WheelError(RuntimeError):
    pass


def read_pins(path: str = PINS) -> list[tuple[Requirement, bool]]:
    """``(name==version requirement, build-from-sdist?)`` per line of the pins file."""
    pins = []
    for lineno, line in enumerate(open(path, encoding="utf-8"), 1):
        text, _, comment = line.partition("#")
        if not text.strip():
            continue
        req = Requirement(text.strip())
        spec = list(req.specifier)
        if len(spec) != 1 or spec[0].operator != "==":
            raise WheelError(f"{path}:{lineno}: {text.strip()!r} must pin one exact version (name==X)")
        pins.append((req, comment.strip() == "build"))
    names = [canonicalize_name(r.name) for r, _ in pins]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise WheelError(f"{path}: more than one pin for {', '.join(dupes)} (pip needs one version each)")
    return pins


def pinned_version(req: Requirement) -> Version:
    return Version(next(iter(req.specifier)).version)


def project_requirements(pyproject: str = os.path.join(ROOT, "pyproject.toml")) -> list[Requirement]:
    with open(pyproject, "rb") as f:
        return [Requirement(r) for r in tomllib.load(f)["project"]["dependencies"]]


def check_pins(pins: list[tuple[Requirement, bool]], requirements: list[Requirement]) -> list[str]:
    """Problems: a pin outside pyproject's specifier; a dependency neither pinned nor in the image."""
    pinned = {canonicalize_name(r.name): pinned_version(r) for r, _ in pins}
    problems = []
    for req in requirements:
        name = canonicalize_name(req.name)
        if name in pinned:
            if pinned[name] not in req.specifier:
                problems.append(f"{req.name}: pinned {pinned[name]} is outside pyproject's {req}")
        elif name not in IMAGE:
            problems.append(f"{req.name}: a project dependency neither in the GPU image nor pinned")
    return problems


def wheel_requirements(path: str) -> list[Requirement]:
    """The wheel's own run-time requirements on the GPU machine (extras and other markers out)."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(meta).decode("utf-8"))
    reqs = []
    for text in msg.get_all("Requires-Dist") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({**TARGET_ENV, "extra": ""}):
            reqs.append(req)
    return reqs


def check_wheel_deps(paths: list[str], pins: list[tuple[Requirement, bool]]) -> list[str]:
    pinned = {canonicalize_name(r.name): pinned_version(r) for r, _ in pins}
    problems = []
    for path in paths:
        for req in wheel_requirements(path):
            name = canonicalize_name(req.name)
            if name in pinned and pinned[name] not in req.specifier:
                problems.append(f"{os.path.basename(path)} needs {req}, pinned {pinned[name]}")
            elif name not in pinned and name not in IMAGE:
                problems.append(f"{os.path.basename(path)} needs {req}: neither in the image nor pinned")
    return problems


def _pip(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise WheelError(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")


def fetch(req: Requirement, build: bool, dest: str) -> str:
    """Download (or, for ``build`` pins, build) the wheel of ``req`` into ``dest``; returns its path."""
    name, version = canonicalize_name(req.name), pinned_version(req)
    existing = _wheel_for(dest, name, version)
    if existing:
        return existing
    if build:  # sdist-only, pure Python: build here; the result must run anywhere
        _pip(["wheel", "--no-deps", "--wheel-dir", dest, str(req)])
    else:
        platforms = [a for p in PLATFORMS for a in ("--platform", p)]
        _pip(
            [
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                *platforms,
                "--dest",
                dest,
                str(req),
            ]
        )
    path = _wheel_for(dest, name, version)
    if path is None:
        raise WheelError(f"{req}: pip finished but no wheel for it is in {dest}")
    if build and not path.endswith("-py3-none-any.whl"):
        raise WheelError(f"{req}: the built wheel {os.path.basename(path)} is not pure Python")
    return path


def _wheel_for(dest: str, name: str, version: Version) -> str | None:
    for f in sorted(os.listdir(dest)):
        if f.endswith(".whl"):
            wname, wversion, _, _ = parse_wheel_filename(f)
            if wname == name and wversion == version:
                return os.path.join(dest, f)
    return None


def check_installs(dest: str, pins: list[tuple[Requirement, bool]]) -> None:
    """pip, told it installs for CPython 3.12 on manylinux x86_64, takes every pin from ``dest``
    alone (no index): the wheels' tags fit the GPU machine and none is missing."""
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    with tempfile.TemporaryDirectory() as target:
        _pip(
            [
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                *platforms,
                "--target",
                target,
                "--find-links",
                dest,
                *(str(req) for req, _ in pins),
            ]
        )


def tree_bytes() -> int:
    """Bytes of the working tree that travels besides the wheels (tracked + untracked, not ignored)."""
    try:
        files = subprocess.run(
            ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        return 0
    total = 0
    for f in files:
        p = os.path.join(ROOT, f.decode())
        if f and os.path.isfile(p):
            total += os.path.getsize(p)
    return total


def build_folder(dest: str) -> dict:
    pins = read_pins()
    problems = check_pins(pins, project_requirements())
    if problems:
        raise WheelError("pins do not match pyproject.toml / the GPU image:\n  " + "\n  ".join(problems))
    os.makedirs(dest, exist_ok=True)
    paths = [fetch(req, build, dest) for req, build in pins]
    stale = [os.path.join(dest, f) for f in os.listdir(dest) if os.path.join(dest, f) not in paths]
    for p in stale:  # an older version left behind would stop pip on the GPU machine
        os.unlink(p)
    problems = check_wheel_deps(paths, pins)
    if problems:
        raise WheelError("wheels need packages that would be missing there:\n  " + "\n  ".join(problems))
    check_installs(dest, pins)
    return check_size(paths)


def check_size(paths: list[str], limit: int = LIMIT_BYTES) -> dict:
    """The wheels plus the working tree must fit in what may travel to the GPU machine."""
    wheels = sum(os.path.getsize(p) for p in paths)
    tree = tree_bytes()
    if wheels + tree > limit:
        raise WheelError(
            f"{len(paths)} wheels ({wheels / 2**20:.1f} MiB) + {tree / 2**20:.1f} MiB of working tree "
            f"exceed the {limit / 2**20:.0f} MiB that may travel to the GPU machine"
        )
    return {"wheels": len(paths), "wheel_bytes": wheels, "tree_bytes": tree, "limit_bytes": limit}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=os.path.join(ROOT, ".whl"))
    args = ap.parse_args(argv)
    try:
        r = build_folder(args.dest)
    except WheelError as e:
        print(f"gpu-wheels: FAILED: {e}", file=sys.stderr)
        return 1
    for f in sorted(os.listdir(args.dest)):
        print(f"  {os.path.getsize(os.path.join(args.dest, f)) / 2**20:7.2f} MiB  {f}")
    print(
        f"gpu-wheels: {r['wheels']} wheels, {r['wheel_bytes'] / 2**20:.1f} MiB "
        f"(+ {r['tree_bytes'] / 2**20:.1f} MiB working tree) of {r['limit_bytes'] / 2**20:.0f} MiB in {args.dest}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
