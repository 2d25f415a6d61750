"""The front door: every HTTP request, MCP message and console page meets this package first.

`front` (the middleware every request crosses), `callers` (who is calling: the one place keys are
looked up and open mode is decided), `mcp_endpoint` (the ASGI app at `/mcp`), `mcp_adapter` and
`rest_adapter` (the registry as MCP tools and REST routes), `probes` (health, readiness, metrics,
well-known) and `server` (the application built from them).
"""
