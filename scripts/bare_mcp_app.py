"""The bare MCP SDK: one trivial tool over stateless streamable HTTP, the floor a call through Cairn is
compared with (`uvicorn bare_mcp_app:app --port N`, then `tools/call list_projects` on /mcp)."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bare")


@mcp.tool()
def list_projects() -> dict:  # type: ignore[type-arg]  # as the peer app declares it
    """List projects."""
    return {"projects": []}


app = mcp.streamable_http_app(stateless_http=True, host="127.0.0.1")
