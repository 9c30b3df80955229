// Package tools is sandboxd's tool framework: what a tool is (a Definition with
// generated JSON Schemas and MCP annotations), how it runs (an Executor that
// turns an action into an Observation), and how a session gets its tools (a
// Registry of factories resolved into a Toolset).
//
// The framework is transport-free. The in-sandbox agent serves a Toolset over
// its framed protocol; the host exports the same Definitions as OpenAI
// function-calling schemas and MCP tool definitions.
//
// Error convention: a failure the model should read and react to (bad
// arguments, a missing file, a non-matching old_str) is an Observation with
// IsError set. A Go error from Call means the call itself could not happen
// (the context ended, the executor is closed) and is reported by the transport.
package tools
