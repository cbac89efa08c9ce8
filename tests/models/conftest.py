"""Set-ups the model tests share."""

from __future__ import annotations

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset
from easyvideor1.models.loading import load_policy
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.resolve import resolve_data

from ..trainer.dist_worker import build_experience

KINDS = ["video", "image", "text", "mixed"]


def family_experience(out_dir, family: str, records: str, layers: int = 1):
    """A tiny ``layers``-layer model of ``family`` (in eval mode), its processor, and an experience
    of 4 prompts (video, image, text, video + image) x 2 responses, with the dataset it came from."""
    model_dir = make_tiny_model(str(out_dir / family), family, layers=layers)
    model, processor = load_policy(model_dir)
    model.eval()
    cfg = resolve_data(DataConfig(video_fps=None, video_nframes=4), model_dir)
    dataset = RecordDataset.from_files([records], cfg)
    return model, processor, build_experience(processor, dataset, KINDS), dataset
