// An MCP server on stdio, made with the official TypeScript SDK, whose `echo`
// tool takes its description from a file and changes its definition when
// the file does: an upstream that drifts while the gateway runs. Every
// process started with the same file (the gateway may start several)
// changes alike.
//
//   node upstream.mjs DESCRIPTION_FILE
import { readFileSync } from "node:fs";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const file = process.argv[2];
const described = () => readFileSync(file, "utf8").trim();

const server = new McpServer({ name: "changing", version: "1.0.0" });
let description = described();
const echo = server.registerTool(
  "echo",
  { description, inputSchema: { text: z.string() } },
  async ({ text }) => ({ content: [{ type: "text", text }] }),
);
server.registerTool(
  "time",
  { description: "Returns the time on the server." },
  async () => ({ content: [{ type: "text", text: new Date().toISOString() }] }),
);
await server.connect(new StdioServerTransport());

setInterval(() => {
  const now = described();
  if (now !== description) {
    description = now;
    // Sends notifications/tools/list_changed.
    echo.update({ description });
  }
}, 100).unref();
