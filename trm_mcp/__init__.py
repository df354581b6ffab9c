"""`trm mcp`: an MCP server over the TRM HTTP API, for agents such as Hermes (docs/hermes.md).

It is a client of the API like the CLI: it reads TRM_URL (or TRM_API_URL) and TRM_API_TOKEN and
never opens the database, so it can run on a laptop next to the agent, far from the service.
Floors: it stands on `core` (the spec models, for the tools' input schemas) and nothing else of
ours; the API mounts it at /mcp.
"""
