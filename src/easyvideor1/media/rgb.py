"""Decoded frame -> uint8 RGB, converted the way the ``ffmpeg`` command line converts it.

``ffmpeg -i f -pix_fmt rgb24 -f rawvideo -`` (and decord, which decodes through the same libraries)
converts in a filter graph: the ``format=rgb24`` request makes libavfilter insert a ``scale`` filter,
which runs swscale with bicubic filtering and tells it the frame's colour matrix, range and *chroma
sample position* (H.264/HEVC 4:2:0 and 4:2:2 chroma sits at the left luma sample, MPEG-2 style).
PyAV's ``frame.to_ndarray(format="rgb24")`` calls swscale directly: bilinear, and no chroma position,
so swscale assumes centred chroma and shifts it by a fraction of a sample. For 8-bit
yuv420p/yuv422p/yuv444p (and their full-range yuvj twins) swscale takes its unscaled yuv->rgb path,
which uses neither setting, so both give identical pixels (what qwen-vl-utils' decord reader gives).
Every other format (10/12-bit, NV12, ...) goes through the scaled path and differed from the command
line at colour edges (measured: mean absolute difference 4-10 of 255, max up to 127).

So frames are converted through the same filter graph as the command line (``buffer -> format=rgb24
-> buffersink``, ``scale`` auto-inserted as there): bit-identical to it in every format measured
(``tests/media/test_streams_and_colour.py``), and unchanged for 8-bit planar YUV.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import av
import numpy as np

# Scaler threads per graph: 0 lets FFmpeg choose. Worker pools set 1 (see decode.set_decode_threads).
_THREADS = 0
_MAX_GRAPHS = 4  # per thread: a video's frame size, its strips (see resize.py) and a spare

# A graph holds the frame in flight, so each thread has its own: thread ident -> its graphs. Not a
# threading.local: a fork (the pipeline's loader pool forks from a thread) frees the other threads'
# locals in the child, and freeing a graph joins its scaler's worker threads, which do not exist in
# the child: the child hung there for ever. Graphs inherited by a child are kept, never freed or used.
_graphs: dict[int, OrderedDict] = {}
_inherited: list[dict[int, OrderedDict]] = []


def _forget_graphs_in_child() -> None:
    _inherited.append(dict(_graphs))
    _graphs.clear()


os.register_at_fork(after_in_child=_forget_graphs_in_child)


def set_threads(n: int) -> None:
    global _THREADS
    _THREADS = int(n)


def _graph_for(frame: av.VideoFrame) -> av.filter.Graph:
    graphs = _graphs.setdefault(threading.get_ident(), OrderedDict())
    # everything the buffer source is told (a frame that differs gets its own graph), and the threads
    key = (
        frame.format.name,
        frame.width,
        frame.height,
        int(frame.colorspace),
        int(frame.color_range),
        _THREADS,
    )
    graph = graphs.get(key)
    if graph is not None:
        graphs.move_to_end(key)
        return graph
    graph = av.filter.Graph()
    graph.threads = _THREADS
    source = graph.add(
        "buffer",
        video_size=f"{frame.width}x{frame.height}",
        pix_fmt=frame.format.name,
        time_base="1/1000",  # conversion ignores timestamps; frames keep theirs
        pixel_aspect="1/1",
        colorspace=str(int(frame.colorspace)),
        range=str(int(frame.color_range)),
    )
    graph.link_nodes(source, graph.add("format", "pix_fmts=rgb24"), graph.add("buffersink")).configure()
    graphs[key] = graph
    while len(graphs) > _MAX_GRAPHS:
        graphs.popitem(last=False)
    return graph


# swscale's unscaled yuv->rgb path, identical either way (see above): converted directly, which
# skips the graph's frame copies (measured 0.93 ms against 1.39 ms per 1280x720 frame).
_UNSCALED = frozenset({"yuv420p", "yuv422p", "yuv444p", "yuvj420p", "yuvj422p", "yuvj444p"})


def to_rgb24(frame: av.VideoFrame) -> np.ndarray:
    """uint8 ``[H, W, 3]`` RGB of ``frame`` as ``ffmpeg -pix_fmt rgb24`` gives it (no rotation)."""
    if frame.format.name == "rgb24":
        return frame.to_ndarray()
    if frame.format.name in _UNSCALED:
        return frame.to_ndarray(format="rgb24")
    graph = _graph_for(frame)
    try:
        graph.vpush(frame)
        out = graph.vpull()
    except av.FFmpegError:
        _graphs.pop(threading.get_ident(), None)  # a graph left mid-frame must not convert the next one
        raise
    return out.to_ndarray()
