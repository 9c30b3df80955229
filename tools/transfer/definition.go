// Package transfer holds the harness's file tools: upload (a file or a tar
// into the sandbox) and download (a file, or a byte range of it, out),
// byte-exact, as base64 in a tool call. They are for a harness that has
// only an MCP connection (it cannot use the WebSocket API's chunked
// transfers): a patch or an eval script in, a log or an artifact out whole,
// where the terminal cuts output at 30,000 characters and file_editor takes
// text only.
//
// The tools run on the daemon's side: a call becomes one tar stream to or
// from the agent (Filer, the core's session), so the agent's confinement
// holds (the workspace and the session's editable paths; no "..", no
// symlink out, os.Root), and this package adds the checks a caller can get
// wrong before any byte moves: an absolute, clean path; exactly one of
// content_base64 and tar_base64; valid base64 within the size limit; a
// mode; a range inside the file. They are served by MCP endpoints whose
// profile says `transfer_tools: true` (server/config), never by default.
package transfer

import (
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxd/sandboxd/tools"
)

// Tool names.
const (
	UploadName   = "upload"
	DownloadName = "download"
)

// Limits of one call.
const (
	// DefaultMaxUpload bounds the bytes one upload carries (decoded): 16
	// MiB is 21.3 MiB of base64, inside tools.MaxArgumentBytes and the
	// server's default request body of 32 MiB.
	DefaultMaxUpload = 16 << 20
	// DefaultMaxDownload bounds the bytes one download returns: 8 MiB is
	// 10.7 MiB of base64, inside the 16 MiB an MCP client of the official
	// Go SDK reads of one server-sent event.
	DefaultMaxDownload = 8 << 20
	// MaxPath bounds a path's length (Linux's PATH_MAX).
	MaxPath = 4096
	// DefaultMode is the mode of an uploaded file without one.
	DefaultMode = 0o644
)

// Limits bound the calls of a set of tools. Zero fields take the defaults.
type Limits struct {
	MaxUpload   int64 // decoded bytes of content_base64 or tar_base64
	MaxDownload int64 // bytes one download returns
}

func (l Limits) withDefaults() Limits {
	if l.MaxUpload <= 0 {
		l.MaxUpload = DefaultMaxUpload
	}
	if l.MaxDownload <= 0 {
		l.MaxDownload = DefaultMaxDownload
	}
	return l
}

// LimitsForBody are the limits under a request body bound of body bytes
// (the server's --max-message-bytes): an upload's base64 and its JSON
// envelope must fit in one request. 0: the defaults.
func LimitsForBody(body int64) Limits {
	l := Limits{}.withDefaults()
	if body > 0 {
		// base64 is 4 bytes per 3; 64 KiB of room for the JSON-RPC envelope.
		l.MaxUpload = min(l.MaxUpload, max(0, (body-64<<10)/4*3))
	}
	return l
}

// UploadAction is the input of upload.
type UploadAction struct {
	Path          string  `json:"path" jsonschema:"Absolute path in the sandbox. With content_base64: the file to write (parent directories are made; an existing file is replaced). With tar_base64: the directory to unpack into (made if missing)."`
	ContentBase64 *string `json:"content_base64,omitempty" jsonschema:"The file's bytes, base64 (standard alphabet; line breaks allowed). Give this or tar_base64."`
	TarBase64     *string `json:"tar_base64,omitempty" jsonschema:"A tar archive, base64, unpacked under path: entries relative, no '..', no device files, symlinks only to inside the sandbox's writable roots. Give this or content_base64."`
	Mode          *string `json:"mode,omitempty" jsonschema:"Octal permission bits of the file written from content_base64, e.g. \"0755\" for a script (default \"0644\"). Not with tar_base64: a tar carries its own modes."`
}

// UploadResult is upload's structured result.
type UploadResult struct {
	Path   string `json:"path" jsonschema:"the file written, or the directory unpacked into"`
	Kind   string `json:"kind" jsonschema:"file or tar"`
	Bytes  int64  `json:"bytes" jsonschema:"the decoded bytes received: the file's size, or the archive's"`
	SHA256 string `json:"sha256" jsonschema:"hex SHA-256 of those bytes"`
	Mode   string `json:"mode,omitempty" jsonschema:"the file's mode (file uploads)"`
}

// DownloadAction is the input of download.
type DownloadAction struct {
	Path   string `json:"path" jsonschema:"Absolute path of a regular file in the sandbox (under /workspace or an editable path of the session)."`
	Offset *int64 `json:"offset,omitempty" jsonschema:"First byte to return (default 0)."`
	Length *int64 `json:"length,omitempty" jsonschema:"How many bytes to return from offset (default: to the end of the file). A call returns at most the server's limit; ask for the rest in ranges."`
}

// DownloadResult is download's structured result.
type DownloadResult struct {
	Path          string `json:"path"`
	Size          int64  `json:"size" jsonschema:"the file's whole size"`
	Offset        int64  `json:"offset" jsonschema:"where the returned bytes start"`
	Length        int64  `json:"length" jsonschema:"how many bytes are returned"`
	EOF           bool   `json:"eof" jsonschema:"the returned bytes reach the end of the file"`
	SHA256        string `json:"sha256" jsonschema:"hex SHA-256 of the returned bytes"`
	ContentBase64 string `json:"content_base64" jsonschema:"the bytes, base64 (standard alphabet)"`
}

// UploadDefinition is upload as a model or harness sees it.
func UploadDefinition(l Limits) tools.Definition {
	l = l.withDefaults()
	return tools.Definition{
		Name: UploadName,
		Description: fmt.Sprintf("Put a file (content_base64) or a tar archive (tar_base64) into the sandbox, byte-exact. "+
			"For a harness: a patch, an eval script, test fixtures, binaries. At most %s decoded per call. "+
			"Paths are absolute and stay under the sandbox's workspace or editable paths: '..' and symlinks that "+
			"lead out are refused. A file is written whole or not at all (a temporary file renamed into place) and is "+
			"owned by the session's user; its mode is \"mode\" (default \"0644\").", human(l.MaxUpload)),
		InputSchema: tools.SchemaFor[UploadAction](func(s *jsonschema.Schema) {
			s.Properties["mode"].Pattern = `^0?[0-7]{3}$`
			s.Properties["path"].MaxLength = ptr(MaxPath)
		}),
		OutputSchema: tools.SchemaFor[UploadResult](),
		Annotations: tools.Annotations{
			Title: "Upload into the sandbox", ReadOnlyHint: false, DestructiveHint: true, IdempotentHint: true, OpenWorldHint: false,
		},
	}
}

// DownloadDefinition is download as a model or harness sees it.
func DownloadDefinition(l Limits) tools.Definition {
	l = l.withDefaults()
	return tools.Definition{
		Name: DownloadName,
		Description: fmt.Sprintf("Get a file out of the sandbox whole and byte-exact (a log, a patch, an artifact), or a byte "+
			"range of it: offset and length. Returns content_base64, the file's size, the range and the SHA-256 of the "+
			"returned bytes in the structured result. At most %s per call: for a larger file ask for ranges "+
			"(offset 0, then offset+length, ... until eof). Only regular files under the workspace or the editable paths; "+
			"a symlink is not followed.", human(l.MaxDownload)),
		InputSchema: tools.SchemaFor[DownloadAction](func(s *jsonschema.Schema) {
			s.Properties["path"].MaxLength = ptr(MaxPath)
			s.Properties["offset"].Minimum = ptr(0.0)
			s.Properties["length"].Minimum = ptr(0.0)
		}),
		OutputSchema: tools.SchemaFor[DownloadResult](),
		Annotations: tools.Annotations{
			Title: "Download from the sandbox", ReadOnlyHint: true, DestructiveHint: false, IdempotentHint: true, OpenWorldHint: false,
		},
	}
}

// Definitions are both tools' definitions.
func Definitions(l Limits) []tools.Definition {
	return []tools.Definition{UploadDefinition(l), DownloadDefinition(l)}
}

// IsName says whether name is one of this package's tools.
func IsName(name string) bool { return name == UploadName || name == DownloadName }

func ptr[T any](v T) *T { return &v }

// human is a byte count for people: "16 MiB", "1.5 KiB", "100 bytes".
func human(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
