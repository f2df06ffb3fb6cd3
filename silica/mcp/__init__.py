"""MCP: silica's tools served to MCP hosts (``server``), and MCP servers as a tool source."""
