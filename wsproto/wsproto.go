// Package wsproto is the wire format of sandboxd's WebSocket API: JSON-RPC 2.0
// envelopes, method names, and the params and results of every method. The
// server (server/internal/wsapi) and the Go client (client) share it, so the two cannot
// drift. docs/websocket-protocol.md describes the same protocol for people.
package wsproto

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// Subprotocol is the WebSocket subprotocol the server speaks. Clients offer
// it in Sec-WebSocket-Protocol; browsers, which cannot set Authorization on a
// WebSocket handshake, offer BearerPrefix+token next to it.
const Subprotocol = "sandboxd.v1"

// BearerPrefix marks the subprotocol entry that carries the bearer token
// ("bearer.<token>"). The server never echoes it back.
const BearerPrefix = "bearer."

// Path is where the WebSocket endpoint is served.
const Path = "/v1/ws"

// Version is the JSON-RPC version string of every message.
const Version = "2.0"

// ChunkSize is the default size of the pieces files.upload and
// files.download move (4 MiB: 5.3 MiB of base64 per message); a server's
// message limit must hold one.
const ChunkSize = 4 << 20

// MaxIDBytes bounds a request id (as JSON) and a create's idempotency key.
// Both are kept as cache keys for minutes and ids are echoed in every
// stream.output of a call: unbounded, a client could make the server hold
// gigabytes with a handful of requests.
const MaxIDBytes = 256

// MinIdempotencyKeyBytes is the shortest idempotency key of a create: a
// retried create returns the session's token, so the key is a secret of
// the client (a short one could be guessed by another client of the same
// operator token). Use random keys (the Go client uses 128 bits).
const MinIdempotencyKeyBytes = 16

// Methods a client calls.
const (
	MethodSessionCreate = "session.create"
	MethodSessionAttach = "session.attach"
	MethodSessionList   = "session.list"
	MethodSessionClose  = "session.close"
	// MethodSessionPause freezes a session's sandbox (no CPU, memory
	// kept, never idle) until MethodSessionResume.
	MethodSessionPause  = "session.pause"
	MethodSessionResume = "session.resume"
	MethodToolsList     = "tools.list"
	MethodToolsCall     = "tools.call"
	MethodToolsCancel   = "tools.cancel"
	MethodFilesUpload   = "files.upload"
	MethodFilesDownload = "files.download"
	// MethodStreamRead reads chunks of a session's output back from its
	// replay ring: how a client refills a stream.gap.
	MethodStreamRead = "stream.read"
)

// Notifications the server sends.
const (
	// NotifyStreamOutput carries a chunk of a streaming call's output.
	NotifyStreamOutput = "stream.output"
	// NotifySessionClosed tells attached clients their session ended
	// (closed by a client, idle timeout, failure or server shutdown).
	NotifySessionClosed = "session.closed"
	// NotifyStreamGap tells a client that stream.output notifications of
	// a range of seqs were withheld from it (it read more slowly than the
	// session printed): read them back with stream.read.
	NotifyStreamGap = "stream.gap"
)

// MaxStreamRead bounds the data of one stream.read result (and is its
// default max_bytes).
const MaxStreamRead = 1 << 20

// Error codes. The JSON-RPC 2.0 range for protocol failures; -32000..-32099
// are sandboxd's ("server error" range). Tool failures the model should read
// are not errors: they are observations with is_error set.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603

	CodeUnauthenticated = -32001 // the token is missing or wrong
	CodePermission      = -32003 // the token may not do this (a session token creating sessions)
	CodeNotFound        = -32004 // no such session (or not yours), file, transfer or call
	CodeTimeout         = -32008 // a deadline passed
	CodeConflict        = -32009 // a request id reused with different params; a path that exists
	CodeBusy            = -32029 // too many requests or sessions; retry later
	CodeUnavailable     = -32030 // the server is shutting down or the session is not ready
	CodeCancelled       = -32800 // the call was cancelled (tools.cancel, shutdown)
)

// Request is a JSON-RPC request or, without ID, a notification.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// Response is a JSON-RPC response: Result or Error.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Notification is a server-to-client message without id.
type Notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// Message is any incoming message on the client side: a response (ID set,
// Method empty) or a notification (Method set).
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Error is a JSON-RPC error object.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Duration is a duration on the wire: a number of seconds (30, 0.5) or a Go
// duration string ("90s", "15m"). It marshals as seconds.
type Duration time.Duration

// MarshalJSON writes seconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(time.Duration(d).Seconds(), 'f', -1, 64)), nil
}

// UnmarshalJSON reads seconds or a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := time.ParseDuration(str)
		if err != nil {
			return fmt.Errorf("duration %q: want seconds or a Go duration like \"90s\"", str)
		}
		*d = Duration(v)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("duration %s: want seconds or a Go duration like \"90s\"", s)
	}
	ns := f * float64(time.Second)
	if math.IsNaN(ns) || ns >= math.MaxInt64 || ns <= math.MinInt64 {
		return fmt.Errorf("duration %s is out of range: at most %.0f seconds", s, time.Duration(math.MaxInt64).Seconds())
	}
	*d = Duration(ns)
	return nil
}

// Limits are the resource limits a session asks for. Zero means the server's
// default.
type Limits struct {
	MemoryMB int     `json:"memory_mb,omitempty"`
	CPUs     float64 `json:"cpus,omitempty"`
	Pids     int     `json:"pids,omitempty"`
	// TmpMB is the size of the session's /tmp tmpfs.
	TmpMB int `json:"tmp_mb,omitempty"`
}

// TerminalParams tune a session's terminal tool (session.create's
// "terminal"). Zero fields take the server's defaults.
type TerminalParams struct {
	// NoChangeTimeout is the soft timeout: a command that prints nothing
	// new for this long returns with exit code -1 and keeps running
	// (OpenHands' no_change_timeout_seconds). Default 10 s; 0.1 s to 24 h.
	NoChangeTimeout Duration `json:"no_change_timeout,omitempty"`
}

// CreateParams are the params of session.create. Unknown fields are an
// invalid-params error, so a client asking for a feature this server lacks
// (skills, MCP sidecars) learns it at once instead of silently not getting it.
type CreateParams struct {
	// Profile names one of the server's session profiles (serve --config);
	// empty: the "default" profile if the server defines one, else the
	// server's defaults. The fields below overlay the profile's: each one
	// set replaces the profile's, env and labels are merged (these win).
	// An unknown profile is an invalid-params error listing the defined
	// ones.
	Profile string            `json:"profile,omitempty"`
	Image   string            `json:"image,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Cwd is the initial working directory; empty: the image's WORKDIR
	// when it names one other than "/", else /workspace.
	Cwd string `json:"cwd,omitempty"`
	// User is "uid" or "uid:gid", numeric and never 0 (default
	// 1000:1000). "image" (the image's USER, root included) is refused
	// here: only a session profile of the server's config may set it.
	User string `json:"user,omitempty"`
	// EditablePaths are folders of the image the session must be able to
	// change (a task's repository such as /testbed, an environment under
	// /opt): each becomes a volume at the same path, seeded with the
	// image's content, owned by the session user, on the disk quota like
	// /workspace; files may be transferred there too. At most 16.
	EditablePaths []string `json:"editable_paths,omitempty"`
	Limits        *Limits  `json:"limits,omitempty"`
	Network       string   `json:"network,omitempty"` // "none" (default), "bridge", "internal" or a network's name
	// AllowHosts limits a "bridge" session's egress to these host names
	// and "*.suffix" wildcards (HTTP and TLS, through its egress proxy),
	// IP addresses and CIDR prefixes (any port).
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// Runtime is the engine's OCI runtime for the sandbox ("runsc": gVisor);
	// empty: the server's default (serve --runtime), else the engine's.
	// One the engine lacks is an invalid-params error naming those it has.
	Runtime string `json:"runtime,omitempty"`
	// Skills selects skills of the server's roots by path prefix ("fuzz",
	// "fuzz/run-campaign", or "all" for every top-level skill); they are
	// mounted read-only at /skills and become tools (load_skill and one
	// per executable skill). A prefix selecting nothing is invalid params.
	Skills []string `json:"skills,omitempty"`
	// SkillsInstall is "lazy" (default: a skill's installer runs before
	// its first call) or "eager" (before the session is handed out).
	SkillsInstall string `json:"skills_install,omitempty"`
	// MCPServers run as sidecar containers of the session; their tools
	// become the session's, named <name>__<tool>. Their images must be
	// allowed (serve --allow-image) like the session's.
	MCPServers  []MCPServer       `json:"mcp_servers,omitempty"`
	IdleTimeout Duration          `json:"idle_timeout,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Terminal tunes the session's terminal tool.
	Terminal *TerminalParams `json:"terminal,omitempty"`
	// ShellInit is "none" (default) or "image": the terminal's shell reads
	// the image user's ~/.bashrc and the image's BASH_ENV at start, so a
	// venv or conda activation there applies (docs/harness.md).
	ShellInit string `json:"shell_init,omitempty"`
	// Entrypoint is "none" (default) or "image": the image's ENTRYPOINT +
	// CMD runs as a supervised background process of the session, started
	// before the first call, its output in /run/sandboxd/state/entrypoint.log.
	Entrypoint string `json:"entrypoint,omitempty"`
	// ToolSet is "openhands" (default: terminal, file_editor, grep, glob),
	// "openai" (OpenAI's shell and apply_patch, grep, glob) or "both";
	// skills and sidecar tools come with any (docs/openai-tools.md).
	ToolSet string `json:"tool_set,omitempty"`
	// IdempotencyKey makes a retried create return the first create's
	// session instead of starting a second sandbox. Keys are scoped to the
	// caller's token and remembered for ten minutes. A retry returns the
	// session's token, so the key must be a random secret of the client:
	// MinIdempotencyKeyBytes to MaxIDBytes long.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// CreateResult is the result of session.create. SessionToken is the session's
// capability: it is returned here only, and is what session.attach (or a
// connection authenticated with it) needs.
type CreateResult struct {
	SessionID    string             `json:"session_id"`
	SessionToken string             `json:"session_token"`
	State        string             `json:"state"`
	Tools        []tools.Definition `json:"tools"`
	NextSeq      uint64             `json:"next_seq"`
}

// AttachParams are the params of session.attach. LastSeq is the seq of the
// last stream.output the client saw (0 for none); the server replays every
// later chunk it still holds, then streams live.
type AttachParams struct {
	SessionID    string `json:"session_id"`
	SessionToken string `json:"session_token,omitempty"`
	LastSeq      uint64 `json:"last_seq,omitempty"`
}

// AttachResult is the result of session.attach. Replayed chunks follow it as
// stream.output notifications. Missed is true when chunks after LastSeq were
// already dropped from the server's bounded buffer: output was lost.
type AttachResult struct {
	SessionID string             `json:"session_id"`
	State     string             `json:"state"`
	Tools     []tools.Definition `json:"tools"`
	// Replayed is how many chunks follow; NextSeq the seq the next new chunk
	// will get.
	Replayed int    `json:"replayed"`
	NextSeq  uint64 `json:"next_seq"`
	Missed   bool   `json:"missed,omitempty"`
}

// SessionRef names a session: the params of session.close, and the base of
// every session-scoped method. SessionToken is optional on a connection that
// created or attached the session, or that authenticated with its token.
type SessionRef struct {
	SessionID    string `json:"session_id"`
	SessionToken string `json:"session_token,omitempty"`
}

// SessionInfo describes a session in session.list.
type SessionInfo struct {
	SessionID string            `json:"session_id"`
	State     string            `json:"state"`
	Image     string            `json:"image,omitempty"`
	API       string            `json:"api,omitempty"` // "ws" or "mcp"
	Labels    map[string]string `json:"labels,omitempty"`
}

// ListResult is the result of session.list.
type ListResult struct {
	Sessions []SessionInfo `json:"sessions"`
}

// PauseResult is the result of session.pause and session.resume: whether
// the session is paused now.
type PauseResult struct {
	Paused bool `json:"paused"`
}

// CloseResult is the result of session.close.
type CloseResult struct {
	Closed bool `json:"closed"`
}

// ToolsListParams are the params of tools.list. Format is "" (sandboxd's
// definitions), "mcp" (MCP tool objects) or "openai" (function-calling
// tools).
type ToolsListParams struct {
	SessionRef
	Format string `json:"format,omitempty"`
}

// ToolsListResult is the result of tools.list; Tools holds objects of the
// requested format.
type ToolsListResult struct {
	Tools []any `json:"tools"`
}

// CallParams are the params of tools.call. With Stream, output arrives as
// stream.output notifications while the call runs (call_id = the request id).
type CallParams struct {
	SessionRef
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Stream    bool            `json:"stream,omitempty"`
}

// CallResult is the result of tools.call: the tool's observation. A tool
// failure the model should read (bad arguments, a missing file, a non-zero
// exit is not even that) has is_error set; it is not a JSON-RPC error.
type CallResult = tools.Observation

// CancelParams are the params of tools.cancel. CallID is the id of the
// tools.call request.
type CancelParams struct {
	SessionRef
	CallID json.RawMessage `json:"call_id"`
}

// CancelResult is the result of tools.cancel; Cancelled is false when the
// call had already finished.
type CancelResult struct {
	Cancelled bool `json:"cancelled"`
}

// StreamOutput is the params of a stream.output notification. Seq numbers
// the chunks of a session 1, 2, 3... across all its calls. Data is text;
// bytes that are not valid UTF-8 are replaced (a multi-byte character split
// across chunks is kept whole).
type StreamOutput struct {
	SessionID string          `json:"session_id"`
	CallID    json.RawMessage `json:"call_id"`
	Seq       uint64          `json:"seq"`
	Data      string          `json:"data"`
}

// StreamGap is the params of a stream.gap notification: the chunks FromSeq
// to ToSeq (inclusive) of the session's output, Bytes bytes of data in
// all, were not sent to this connection. CallIDs are the calls they
// belong to (at most MaxGapCalls; MoreCalls when there were more). The
// notice comes in seq order: after the chunk FromSeq-1, before ToSeq+1.
type StreamGap struct {
	SessionID string            `json:"session_id"`
	FromSeq   uint64            `json:"from_seq"`
	ToSeq     uint64            `json:"to_seq"`
	Bytes     int64             `json:"bytes"`
	CallIDs   []json.RawMessage `json:"call_ids"`
	MoreCalls bool              `json:"more_calls,omitempty"`
}

// MaxGapCalls bounds StreamGap.CallIDs.
const MaxGapCalls = 16

// StreamReadParams are the params of stream.read: the chunks FromSeq to
// ToSeq (inclusive) of the session's output, as far as the server's replay
// ring still holds them, at most MaxBytes of data (default and limit
// MaxStreamRead; at least one chunk is returned).
type StreamReadParams struct {
	SessionRef
	FromSeq  uint64 `json:"from_seq"`
	ToSeq    uint64 `json:"to_seq"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// StreamReadResult is the result of stream.read. Chunks are in seq order;
// when the last one ends before ToSeq (the byte bound), read on from the
// seq after it. LostToSeq, when not 0, says the chunks FromSeq to LostToSeq
// are no longer held: that output is lost. NextSeq is the seq the next
// new chunk will get (ToSeq is clamped below it).
type StreamReadResult struct {
	Chunks    []StreamOutput `json:"chunks"`
	LostToSeq uint64         `json:"lost_to_seq,omitempty"`
	NextSeq   uint64         `json:"next_seq"`
}

// SessionClosed is the params of a session.closed notification.
type SessionClosed struct {
	SessionID string `json:"session_id"`
	Reason    string `json:"reason,omitempty"`
}

// UploadParams are the params of files.upload: a tar stream (base64) to
// unpack under Path (a directory in the sandbox, created if missing).
//
// One message: {session_id, path, tar_base64}. Chunked: the first message
// has final=false and returns an upload_id; the next ones carry upload_id
// and the following bytes; the one with final=true finishes the upload.
type UploadParams struct {
	SessionRef
	Path     string `json:"path,omitempty"`
	UploadID string `json:"upload_id,omitempty"`
	// Offset is where Data starts in the tar stream (the bytes sent so
	// far); a chunk at another offset is refused with a conflict.
	Offset int64  `json:"offset,omitempty"`
	Data   []byte `json:"tar_base64"`
	// Final defaults to true: a message without it is the whole upload.
	Final *bool `json:"final,omitempty"`
}

// UploadResult is the result of files.upload.
type UploadResult struct {
	UploadID string `json:"upload_id,omitempty"`
	Bytes    int64  `json:"bytes"` // received so far
	Done     bool   `json:"done"`
}

// DownloadParams are the params of files.download: Path (a file or a
// directory) comes back as a tar stream. The first message names Path; if
// the result is not EOF, the client asks for the rest with DownloadID and
// Offset (the bytes received so far). Asking again at the same offset
// returns the same chunk, so a retry after a reconnect loses nothing.
type DownloadParams struct {
	SessionRef
	Path       string `json:"path,omitempty"`
	DownloadID string `json:"download_id,omitempty"`
	Offset     int64  `json:"offset,omitempty"`
	ChunkSize  int    `json:"chunk_size,omitempty"`
}

// DownloadResult is the result of files.download.
type DownloadResult struct {
	DownloadID string `json:"download_id,omitempty"`
	Offset     int64  `json:"offset"` // of Data in the tar stream
	Data       []byte `json:"tar_base64"`
	EOF        bool   `json:"eof"`
}

// MCPServer declares an MCP server run as a sidecar container of a
// session (sandbox.MCPServer).
type MCPServer struct {
	Name      string            `json:"name"`
	Image     string            `json:"image"`
	Command   []string          `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Transport string            `json:"transport,omitempty"` // "stdio" (default), "http" or "sse"
	Port      int               `json:"port,omitempty"`      // http, sse
	Path      string            `json:"path,omitempty"`      // http ("/mcp"), sse ("/sse")
	Start     string            `json:"start,omitempty"`     // "eager" (default) or "lazy"
	Workspace string            `json:"workspace,omitempty"` // "ro" or "rw": the session's /workspace at /workspace; "": none
	// Limits bound the sidecar (memory_mb, cpus, pids; tmp_mb is not
	// used); zero fields take the sandbox's.
	Limits *Limits `json:"limits,omitempty"`
}
