package proto

import "encoding/json"

// Methods of the protocol. Requests go host -> agent; the agent only sends
// responses and notifications.
const (
	MethodPing        = "ping"
	MethodToolsList   = "tools/list"
	MethodToolsCall   = "tools/call"
	MethodUploadBegin = "fs/upload/begin"
	MethodUploadChunk = "fs/upload/chunk"
	MethodUploadEnd   = "fs/upload/end"
	MethodDownload    = "fs/download/begin"
	MethodDownloadRd  = "fs/download/read"
	MethodShutdown    = "shutdown"
	// MethodSkillsInstall runs the dependency installers of the session's
	// skills that have not run yet (skills_install: eager).
	MethodSkillsInstall = "skills/install"

	// Notifications (frames without id).
	MethodCancel = "cancel"   // host -> agent: {id}
	MethodAbort  = "fs/abort" // host -> agent: {transfer}
	MethodStream = "stream"   // agent -> host: {id, seq, data}
	// MethodStreamAck returns bytes of a streaming call's window (see
	// CallParams.Window): host -> agent {id, bytes}.
	MethodStreamAck = "stream/ack"
)

// ChunkSize is the payload of one upload or download chunk. Transfers of
// any size are a sequence of chunk requests, each acknowledged before the
// next, which gives flow control for free: neither side buffers more than a
// chunk, and a slow disk or a slow host never stalls other calls.
const ChunkSize = 1 << 20

// Params and results of the methods.
type (
	// CallParams are the params of tools/call.
	CallParams struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
		Stream    bool            `json:"stream,omitempty"`
		// Window, when not 0, paces a streaming call: the agent sends at
		// most this many bytes of output the host has not acknowledged
		// (stream/ack), then the tool waits (its process blocks on a full
		// pipe or terminal) until the host has taken some.
		Window int64 `json:"window,omitempty"`
	}
	// StreamAckParams are the params of a stream/ack notification.
	StreamAckParams struct {
		ID    uint64 `json:"id"`
		Bytes int64  `json:"bytes"`
	}
	// CancelParams are the params of a cancel notification.
	CancelParams struct {
		ID uint64 `json:"id"`
	}
	// Data fields of params and results hold the payload when a peer
	// sends it inline (base64 in JSON); normally it is the frame's
	// binary payload and the field is absent.
	// StreamParams are the params of a stream notification.
	StreamParams struct {
		ID   uint64 `json:"id"`
		Seq  uint64 `json:"seq"`
		Data []byte `json:"data,omitempty"`
	}
	// PathParams are the params of fs/upload/begin and fs/download/begin.
	PathParams struct {
		Path string `json:"path"`
	}
	// TransferParams name a transfer: the result of a begin, the params
	// of fs/upload/end, fs/download/read and fs/abort.
	TransferParams struct {
		Transfer string `json:"transfer"`
	}
	// ChunkParams are the params of fs/upload/chunk.
	ChunkParams struct {
		Transfer string `json:"transfer"`
		Seq      uint64 `json:"seq"`
		Data     []byte `json:"data,omitempty"`
	}
	// ChunkResult is the result of fs/download/read.
	ChunkResult struct {
		Data []byte `json:"data,omitempty"`
		EOF  bool   `json:"eof,omitempty"`
	}
	// UploadResult is what an upload extracted.
	UploadResult struct {
		Files int   `json:"files"`
		Dirs  int   `json:"dirs"`
		Links int   `json:"links"`
		Bytes int64 `json:"bytes"`
	}
)
