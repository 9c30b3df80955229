package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/tools"
)

// Defaults of Options.
const (
	DefaultListen          = "127.0.0.1:7070"
	DefaultMCPImage        = "sandboxd-default:latest"
	DefaultDrainTimeout    = 20 * time.Second
	DefaultMaxMessageBytes = 32 << 20
	// DefaultMaxSessions caps live sessions (WebSocket and MCP together):
	// every session is a container, and an MCP client that reconnects
	// without ending its sessions starts a new one each time.
	DefaultMaxSessions = 64
	readHeaderTimeout  = 5 * time.Second
	idleTimeout        = 120 * time.Second
	maxHeaderBytes     = 64 << 10
	// DefaultBodyReadTimeout bounds reading one request body (32 MiB at
	// 0.5 MiB/s). http.Server's ReadTimeout cannot do it: its deadline stays
	// on the connection after the body, and net/http then cancels the request
	// of a long MCP call or SSE stream.
	DefaultBodyReadTimeout   = time.Minute
	shutdownCloseGraceMargin = 5 * time.Second
)

// Options configure a Server. Backend and OperatorToken are required.
type Options struct {
	// Listen is host:port, or unix:/path for a unix socket (mode 0600).
	Listen string
	// TLSCert and TLSKey serve HTTPS (and wss). Required for a
	// non-loopback Listen unless InsecureAllowRemote.
	TLSCert, TLSKey string
	// InsecureAllowRemote allows a non-loopback Listen without TLS.
	InsecureAllowRemote bool
	// AllowOrigins lists browser origins (scheme://host[:port]) that may
	// call the API; "*" any. Requests without Origin (non-browser) pass.
	AllowOrigins []string
	// AllowHosts adds Host names beyond the loopback ones; "*" any.
	AllowHosts []string

	// Backend is the session manager (sandboxmgr.New over a sandbox.Manager,
	// or a fake in tests).
	Backend       core.Backend
	OperatorToken string
	// StateDir, if set, keeps session token digests (StateDir/sessions) so
	// sessions kept over a restart stay reachable.
	StateDir string

	// AllowedImages are path.Match patterns for the images clients may ask
	// for; empty allows any.
	AllowedImages []string
	// MaxSessions caps live sessions; 0 is DefaultMaxSessions, negative
	// no cap.
	MaxSessions int
	// MaxMessageBytes bounds a WebSocket message and an MCP request body.
	MaxMessageBytes int64
	// BodyReadTimeout bounds the time to read a request body (slowloris);
	// default DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration

	// Profiles are the session profiles by name (serve --config), as
	// written: session.create names one (its fields overlay it), /mcp/NAME
	// serves one. "default", when defined, is the profile of a create that
	// names none and of /mcp.
	Profiles map[string]sandbox.SessionOptions
	// MCPImage is the image of the sandboxes of /mcp when Profiles defines
	// no "default".
	MCPImage string
	// MCPTools lists a profile's tools for MCP clients that have no
	// sandbox yet (revision 2026-07-28); nil: the built-in tools
	// (mcpapi.Options.Tools).
	MCPTools func(profile string, opts sandbox.SessionOptions) []tools.Definition
	// MCPToolsVersion changes whenever what MCPTools returns may have
	// changed (an MCP sidecar's tools did); the stateless MCP path lists
	// again then. nil: MCPTools's answer never changes.
	MCPToolsVersion func() uint64
	// MCPTransferTools says whether a profile's MCP endpoint ("" for
	// /mcp) serves the harness tools upload and download (the config's
	// `transfer_tools`). nil: none does.
	MCPTransferTools func(profile string) bool
	// MCPSnapshotTools says whether a profile's MCP endpoint serves the
	// harness tools snapshot, fork, restore and snapshot_list (the
	// config's `snapshot_tools`). nil: none does.
	MCPSnapshotTools func(profile string) bool
	// SnapshotRetention is each profile's `snapshot_retention` by name.
	SnapshotRetention map[string]time.Duration
	// MCPSessionTimeout ends an MCP session (and its sandbox), and closes a
	// sandbox a 2026-07-28 client opened by handle, after this long without
	// a request (a tool call, for a handle).
	MCPSessionTimeout time.Duration

	// KeepSessions leaves sessions running at shutdown for the next daemon.
	KeepSessions bool
	// DrainTimeout is how long shutdown lets calls in flight finish before
	// cancelling them.
	DrainTimeout time.Duration

	Logger  *slog.Logger
	Version string

	// Tuning for tests and benchmarks; zero takes the package defaults.
	WSQueueMessages int
	WSQueueBytes    int64
	WSPingInterval  time.Duration
	WSWriteTimeout  time.Duration
	// WSOutputBytes is the part of a connection's queue session output
	// may take before it is withheld (a stream.gap), WSReplyWait how long
	// a reply waits for room (wsapi.Options).
	WSOutputBytes int64
	WSReplyWait   time.Duration
	RingBytes     int
	// DrainTransferIdle is the idle time of transfers once the server
	// drains (default core.DrainTransferIdle).
	DrainTransferIdle time.Duration
	// AbandonedCreateGrace is how long a session whose creating client
	// left before the answer waits for a retry with its idempotency key
	// before it is closed (default core.DefaultAbandonedCreateGrace).
	AbandonedCreateGrace time.Duration
}

func (o *Options) validate() error {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.Backend == nil {
		return errors.New("server: Options.Backend is required")
	}
	if len(o.OperatorToken) < auth.MinTokenLength {
		return fmt.Errorf("server: the operator token must be at least %d characters", auth.MinTokenLength)
	}
	if err := CheckListen(*o); err != nil {
		return err
	}
	if o.MCPImage == "" {
		o.MCPImage = DefaultMCPImage
	}
	switch {
	case o.MaxSessions == 0:
		o.MaxSessions = DefaultMaxSessions
	case o.MaxSessions < 0:
		o.MaxSessions = 0 // the core's "no cap"
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// requestPolicy is the Host and Origin check of AllowHosts and AllowOrigins.
func (o *Options) requestPolicy() auth.RequestPolicy {
	return auth.RequestPolicy{
		Hosts:   auth.HostPolicy{Allowed: o.AllowHosts},
		Origins: auth.OriginPolicy{Allowed: o.AllowOrigins},
	}
}

// remote reports whether Listen may be reached from other machines.
func (o *Options) remote() bool {
	if strings.HasPrefix(o.Listen, "unix:") {
		return false
	}
	host, _, _ := net.SplitHostPort(o.Listen)
	return !auth.IsLoopbackName(host)
}

// CheckListen checks the address and TLS options: a non-loopback address
// needs TLS or InsecureAllowRemote.
func CheckListen(o Options) error {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if strings.HasPrefix(o.Listen, "unix:") {
		return nil
	}
	host, _, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return fmt.Errorf("listen address %q: want host:port or unix:/path: %w", o.Listen, err)
	}
	if !auth.IsLoopbackName(host) && o.TLSCert == "" && !o.InsecureAllowRemote {
		return fmt.Errorf("refusing to listen on %s: it is not a loopback address and TLS is off; "+
			"give --tls-cert and --tls-key, or --insecure-allow-remote if a TLS proxy fronts this server", o.Listen)
	}
	return nil
}
