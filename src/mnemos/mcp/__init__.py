"""Mnemos over the Model Context Protocol: the memory tools (`tools.py`), the server that runs
them (`server.py`), and its transports: streamable HTTP at `/mcp` (`http.py`) and stdio
(`stdio.py`, `mnemos mcp`).

The `mcp` SDK is an extra (`pip install '.[mcp]'` in a checkout): only `tools.py` and `http.py` are
imported without it, and `/mcp` then answers 501 `mcp_not_installed`.
"""

from __future__ import annotations

import importlib.util


def sdk_installed() -> bool:
    """Whether the `mcp` SDK can be imported (the `mcp` extra)."""
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # hidden or half-removed
        return False
