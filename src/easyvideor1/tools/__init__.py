"""Tools the policy may call in an episode (``tools.*``), one concept per module: the registry and
the types a tool sees (``base.py``), the ``tools`` section (``config.py``), the frame tracks the
video tools read (``tracks.py``), the built-in video tools (``video.py``), running one turn's calls
within an episode's budgets (``calls.py``), and the tools of one step or job (``session.py``)."""

from .base import (
    TOOLS,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    UnknownToolError,
    get_tool,
    load_tool_files,
    register_tool,
    tool_specs,
)
from .config import ToolsConfig

__all__ = [
    "TOOLS",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "ToolsConfig",
    "UnknownToolError",
    "get_tool",
    "load_tool_files",
    "register_tool",
    "tool_specs",
]
