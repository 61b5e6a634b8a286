package mcp

// BodyChargeForTest is what an MCP body costs the core's byte budget per
// body byte.
const BodyChargeForTest = bodyCharge
