"""Run qwen-vl-utils 0.0.14 ``fetch_video`` (decord reader) on cases read from stdin, as JSON.

A separate process on purpose: decord bundles its own FFmpeg, and once it has opened a video in a
process, PyAV's encoders and decord itself misbehave there (seen: libvpx refusing to open, decord
"from_size == to_size" failures); decord is also known to hang. Input: a JSON list of
``{"path", "params", "factor"}``; output: a JSON list of ``{"indices", "hw"}`` or ``{"error"}``.
"""

import json
import os
import sys

os.environ["FORCE_QWENVL_VIDEO_READER"] = "decord"

from qwen_vl_utils import vision_process as qv  # noqa: E402


def main() -> None:
    results = []
    for case in json.load(sys.stdin):
        ele = {"video": case["path"], **case["params"]}
        try:
            video, meta = qv.fetch_video(
                ele, image_patch_size=case["factor"] // 2, return_video_metadata=True
            )
            results.append(
                {
                    "indices": [int(i) for i in meta["frames_indices"]],
                    "hw": list(video.shape[2:]),
                    "backend": meta.get("video_backend"),
                }
            )
        except Exception as e:  # the reference refused this case
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
