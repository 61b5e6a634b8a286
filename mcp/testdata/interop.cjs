// Interop test client: the official MCP TypeScript SDK against sandboxd.
// Driven by cmd/sandboxd/mcp_interop_test.go:
//   node interop.cjs SDK_DIR stdio BINARY ARGS...
//   node interop.cjs SDK_DIR http URL TOKEN
// It prints the session as JSON lines ({"step",…}) on stdout and exits 1
// on the first failed check.
'use strict';
const { createRequire } = require('module');
const [sdkDir, mode, ...rest] = process.argv.slice(2);
const req = createRequire(sdkDir + '/package.json');
const { Client } = req('@modelcontextprotocol/sdk/client/index.js');
const { McpError } = req('@modelcontextprotocol/sdk/types.js');

function log(step, data) { console.log(JSON.stringify({ step, ...data })); }
function check(ok, what, got) {
  if (!ok) {
    log('FAIL', { what, got });
    process.exit(1);
  }
}

async function main() {
  let transport;
  if (mode === 'stdio') {
    const { StdioClientTransport } = req('@modelcontextprotocol/sdk/client/stdio.js');
    transport = new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: 'ignore' });
  } else {
    const { StreamableHTTPClientTransport } = req('@modelcontextprotocol/sdk/client/streamableHttp.js');
    transport = new StreamableHTTPClientTransport(new URL(rest[0]), {
      requestInit: { headers: { Authorization: 'Bearer ' + rest[1] } },
    });
  }
  const client = new Client({ name: 'sandboxd-interop', version: '1.0.0' });
  await client.connect(transport);
  const sv = client.getServerVersion();
  log('connected', { mode, server: sv, protocolVersion: transport.protocolVersion || null });
  check(sv && sv.name === 'sandboxd', 'serverInfo.name', sv);

  const { tools } = await client.listTools();
  log('tools/list', { tools: tools.map(t => ({ name: t.name, annotations: t.annotations, meta: t._meta, hasOutputSchema: !!t.outputSchema })) });
  const names = tools.map(t => t.name).sort();
  check(JSON.stringify(names) === JSON.stringify(['acme.echo', 'acme.identity', 'acme.lookup']), 'tool names', names);
  for (const t of tools) {
    const env = t._meta && t._meta['x.ai/tool'];
    check(env && env.name === t.name && env.namespace === 'mcp' && !('input' in env), 'tools/list x.ai/tool envelope without input', t._meta);
    check(t.inputSchema.type === 'object', 'inputSchema type object', t.inputSchema);
  }
  const echo = tools.find(t => t.name === 'acme.echo');
  check(echo.annotations.readOnlyHint === true, 'acme.echo readOnlyHint', echo.annotations);

  // A validated call.
  const ok = await client.callTool({ name: 'acme.echo', arguments: { message: 'hi', repeat: 2 } });
  log('tools/call acme.echo', { result: ok });
  check(!ok.isError, 'echo isError', ok.isError);
  check(JSON.stringify(ok.structuredContent) === JSON.stringify({ echo: 'hihi', length: 4 }), 'echo structuredContent', ok.structuredContent);
  check(ok.content.length === 1 && ok.content[0].type === 'text' && JSON.parse(ok.content[0].text).echo === 'hihi', 'echo text block', ok.content);
  check(ok._meta && ok._meta['x.ai/tool'] && ok._meta['x.ai/tool'].name === 'acme.echo', 'echo result x.ai/tool', ok._meta);

  // Schema-invalid input: a tool execution error the model can read.
  const bad = await client.callTool({ name: 'acme.echo', arguments: { repeat: 0 } });
  log('tools/call acme.echo (invalid input)', { result: bad });
  check(bad.isError === true && /^input-validation-failed: /.test(bad.content[0].text), 'invalid input isError', bad);
  check(bad._meta['io.github.sandboxd/error'].code === 'input-validation-failed', 'error _meta', bad._meta);

  // A failing handler.
  const fail = await client.callTool({ name: 'acme.lookup', arguments: { id: 3 } });
  log('tools/call acme.lookup (handler error)', { result: fail });
  check(fail.isError === true && fail._meta['io.github.sandboxd/error'].code === 'handler-error', 'handler error', fail);
  check(fail._meta['x.ai/tool'].name === 'acme.lookup', 'failed result x.ai/tool', fail._meta);

  // Over the tool's memMB (64): 1 MiB repeated 100 times; it runs long
  // enough for the "running" progress notification to arrive before the
  // answer. (The TS client handles notifications a microtask after a
  // response read in the same chunk, and drops the progress handler with
  // the response: a final notification sent just before the answer is
  // reported as "unknown token" by this client.)
  const progress = [];
  const big = await client.callTool({ name: 'acme.echo', arguments: { message: 'x'.repeat(1 << 20), repeat: 100 } }, undefined,
    { onprogress: p => progress.push(p) });
  const bigErr = big._meta && big._meta['io.github.sandboxd/error'];
  log('tools/call acme.echo (over memMB)', { isError: big.isError, text: big.content[0].text.slice(0, 200), error: bigErr, progress });
  check(progress.length >= 1 && /^running call_/.test(progress[0].message), 'progress notification', progress);
  check(big.isError === true && bigErr && bigErr.code === 'limits-exceeded' && bigErr.details.limit === 'memMB', 'limits exceeded', bigErr);

  // An unknown tool is a protocol error with a real code.
  try {
    await client.callTool({ name: 'no.such.tool', arguments: {} });
    check(false, 'unknown tool answered', null);
  } catch (e) {
    log('tools/call no.such.tool', { error: { name: e.constructor.name, code: e.code, message: e.message } });
    check(e instanceof McpError && e.code === -32602, 'unknown tool -32602', { code: e.code, message: e.message });
  }
  await client.close();
  log('ok', {});
}

main().catch(e => { log('FAIL', { error: String(e && e.stack || e) }); process.exit(1); });
