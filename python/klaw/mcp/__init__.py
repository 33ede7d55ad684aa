"""The MCP client: servers listed in engine.yaml `mcpServers` become tool groups.

    manager = McpManager.from_config(config)      # klaw.mcp.manager; nothing started
    await manager.start()                         # each server in the background
    manager.groups()                              # ToolGroups for a chat's registry
    await manager.aclose()                        # children stopped, process groups killed

The `mcp` SDK (a few seconds of import on a Pi, tens of MB) is imported only by the
modules that talk to a server, and only once a server is configured: this package's
top level imports nothing of it. docs/mcp.md.
"""
