"""What every demo shares: its config files, the synthetic data and tiny model it makes, where its runs
write, the frame cache then training, and how a plot, a table and a report are finished."""

from __future__ import annotations

import dataclasses
import json
import os
from importlib import resources

from ..config import ConfigError, RunConfig
from ..data.preprocess import format_report, preprocess
from ..data.synthetic import write_demo_set, write_tool_demo_set
from ..models.families import resolve_family
from ..models.tiny import make_tiny_model
from ..outdir import save_figure, write_text_atomic

CHANCE = 0.25


def demo_config_path(name: str = "demo.yaml") -> str:
    return str(resources.files("easyvideor1") / "configs" / name)


def prepare_demo_assets(cfg: RunConfig, family: str | None = None) -> RunConfig:
    """Create the demo's videos, records and tiny model where ``cfg`` expects them (if missing);
    returns ``cfg`` reading them (``data.train_files`` / ``val_files`` when those are empty).

    The tiny model is of ``family`` (else ``data.model_family``, else Qwen3-VL); a model already
    at ``model.path`` must be of that family."""
    d = cfg.demo
    train, val = os.path.join(d.data_dir, "train.jsonl"), os.path.join(d.data_dir, "val.jsonl")
    if not os.path.exists(val):
        if d.task == "window":
            write_tool_demo_set(d.data_dir, d.n_train, d.n_val, first_view_frames=cfg.data.video_nframes or 4)
        else:
            write_demo_set(d.data_dir, d.n_train, d.n_val, mixed=d.mixed)
    files = {"train_files": cfg.data.train_files or [train], "val_files": cfg.data.val_files or [val]}
    if not os.path.exists(os.path.join(cfg.model.path, "config.json")):
        wanted = resolve_family(None, family or cfg.data.model_family or "qwen3_vl", declared_as="--family")
        make_tiny_model(cfg.model.path, wanted.model_type, layers=d.model_layers)
    elif family is not None:
        try:
            resolve_family(cfg.model.path, family, declared_as="--family")
        except ValueError as e:
            raise ConfigError(f"{e}; or give another model.path or --out") from None
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **files))


def demo_run_paths(out: str, run: str, n_train: int, n_val: int, model: str = "model") -> list[str]:
    """The overrides that put a demo run's data, cache and tiny model under ``out`` (shared by
    every run there) and its output in ``out/run``."""
    return [
        f"demo.data_dir={os.path.join(out, 'data')}",
        f"demo.n_train={n_train}",
        f"demo.n_val={n_val}",
        f"data.cache_dir={os.path.join(out, 'cache')}",
        f"model.path={os.path.join(out, model)}",
        f"trainer.output_dir={os.path.join(out, run)}",
    ]


def cache_and_train(cfg: RunConfig):
    """Build the frame cache of ``cfg``'s training and validation files (its report printed), then
    train: the finished :class:`~easyvideor1.trainer.loop.Trainer`."""
    from ..trainer.loop import Trainer

    files = [cfg.data.train_files[0], cfg.data.val_files[0]]
    print(format_report(preprocess(files, cfg.data, cfg.data.cache_dir, workers=2, progress=False)))
    trainer = Trainer(cfg)
    trainer.train()
    return trainer


def new_plot():
    """``(figure, axes)`` of a demo plot (matplotlib's Agg backend), or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt.subplots(figsize=(7, 4))


def save_plot(fig, ax, path: str, title: str, labels: tuple[str, str], legend: str = "center right") -> str:
    """Finish a demo plot as every demo does (chance, the (x, y) axis ``labels``, accuracy from 0
    to 1, the legend at ``legend``), write it to ``path`` and close it."""
    import matplotlib.pyplot as plt

    ax.axhline(CHANCE, color="grey", ls="--", lw=1, label="chance")
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, loc=legend)
    ax.set_title(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def print_rows(rows: list[tuple[str, object]]) -> None:
    """The demo's result table: names left-aligned, values after them."""
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))


def write_report(path: str, result: dict) -> None:
    """A demo's JSON report, written whole (a planted link at its name is refused, naming it)."""
    write_text_atomic(path, json.dumps(result, indent=1))
