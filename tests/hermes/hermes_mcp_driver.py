"""Hermes's own MCP client as an agent turn would use it, for tests/hermes/test_hermes_drive.py.

Runs in hermes-agent's interpreter (never the project's): registers the MCP servers given as JSON
in argv[1] through `tools.mcp_tool.register_mcp_servers` (what Hermes does with the
`mcp_servers` of its config.yaml), prints one JSON line describing the tools Hermes would send a
model, then reads JSON lines `{"tool": NAME, "args": {...}}` from stdin and answers each with one
JSON line `{"result": TEXT}`: the text Hermes's tool handler gives the model, through Hermes's
tool registry (`registry.dispatch`). No model is called: the test plays the model's part.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from tools.mcp_tool import mcp_prefixed_tool_name, register_mcp_servers
    from tools.registry import registry

    servers = json.loads(sys.argv[1])
    names = register_mcp_servers(servers)
    definitions = registry.get_definitions(set(names), quiet=True)
    print(
        json.dumps({"tools": sorted(names), "definitions_chars": len(json.dumps(definitions))}),
        flush=True,
    )
    for line in sys.stdin:
        if not line.strip():
            continue
        call = json.loads(line)
        name = mcp_prefixed_tool_name(call.get("server", "trm"), call["tool"])
        result = registry.dispatch(name, call.get("args") or {})
        text = result if isinstance(result, str) else json.dumps(result)
        print(json.dumps({"result": text}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
