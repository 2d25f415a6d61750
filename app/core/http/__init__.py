"""The front door: every HTTP request meets this package first, and every transport (REST, MCP over
HTTP or stdio, the console) learns from it who is calling.

`front` (the middleware every request crosses), `callers` (who is calling: the one place keys are
looked up and open mode is decided), `mcp_endpoint` (the ASGI app at `/mcp`), `mcp_adapter` and
`rest_adapter` (the registry as MCP tools and REST routes), `probes` (health, readiness, metrics,
well-known) and `server` (the application built from them). A module serving one transport only is
named `<transport>_<part>`; the others are named for what they hold.
"""
