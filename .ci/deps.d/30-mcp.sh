# 30-mcp.sh: the official MCP TypeScript SDK, the client of the MCP interop
# test (cmd/sandboxd/mcp_interop_test.go), installed under
# $SANDBOXD_TOOLS/mcp-node (ignored by git). Node itself comes with the
# machine (Node 20 is enough for the SDK's Client).
MCP_TS_SDK_VERSION=1.32.2
mcp_node_dir="${SANDBOXD_TOOLS:-./.tools}/mcp-node"
mcp_have="$(node -e "try{console.log(JSON.parse(require('fs').readFileSync(process.argv[1]+'/node_modules/@modelcontextprotocol/sdk/package.json')).version)}catch(e){}" "$mcp_node_dir" 2>/dev/null || true)"
if [ "$mcp_have" != "$MCP_TS_SDK_VERSION" ]; then
	mkdir -p "$mcp_node_dir"
	[ -f "$mcp_node_dir/package.json" ] || echo '{"private":true}' > "$mcp_node_dir/package.json"
	(cd "$mcp_node_dir" && npm install --no-audit --no-fund --save-exact "@modelcontextprotocol/sdk@$MCP_TS_SDK_VERSION")
fi
