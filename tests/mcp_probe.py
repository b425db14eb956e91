"""An MCP stdio server whose one tool, ``probe``, runs the adversarial probe
(``tests/probe.py``, its path the first argument) where the server runs and returns
its report as ``PROBE <json>``: an agent CLI configured with this server probes its
sandbox through an MCP stdio server (``tests/test_containment.py``)."""

from __future__ import annotations

import importlib.util
import json
import sys

from mcp.server.mcpserver import MCPServer

spec = importlib.util.spec_from_file_location("probe", sys.argv[1])
assert spec is not None
assert spec.loader is not None
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

server = MCPServer("prober")


@server.tool()
def run_probe() -> str:
    """Probe the sandbox this server runs in; the report."""
    return "PROBE " + json.dumps(probe.probe(probe.own_scratch()))


if __name__ == "__main__":
    server.run()
