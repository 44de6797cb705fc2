"""The MCP servers: our own stdio server, the HTTP server with its token gate, and the tool list they serve."""
