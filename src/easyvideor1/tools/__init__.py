"""Tools the policy may call in an episode (``tools.*``): the registry and result types
(``base.py``), the built-in video tools and the frames they serve (``video.py``), running one
turn's calls within the budgets (``calls.py``)."""

from .base import (
    TOOLS,
    ToolError,
    ToolResult,
    ToolSpec,
    UnknownToolError,
    get_tool,
    load_tool_files,
    register_tool,
)
from .config import ToolsConfig

__all__ = [
    "TOOLS",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "ToolsConfig",
    "UnknownToolError",
    "get_tool",
    "load_tool_files",
    "register_tool",
]
