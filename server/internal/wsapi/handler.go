// Package wsapi serves sandboxd's WebSocket API: JSON-RPC 2.0 over one
// WebSocket per client at /v1/ws (docs/websocket-protocol.md). It is a thin
// layer over internal/core: this package handles connections, framing,
// bounded outbound queues and the method table; core does the work.
package wsapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/wsproto"
)

// Defaults of Options.
const (
	DefaultMaxMessageBytes = 32 << 20 // a 10 MiB file_text after JSON escaping fits
	DefaultQueueMessages   = 1024
	DefaultQueueBytes      = 16 << 20
	DefaultMaxInFlight     = 64
	DefaultWriteTimeout    = 10 * time.Second
	DefaultPingInterval    = 30 * time.Second
	DefaultMaxConnections  = 1024
	DefaultOutputBytes     = 8 << 20
	DefaultReplyWait       = time.Minute
	handshakeTimeout       = 10 * time.Second
	closeGrace             = time.Second // to send a close frame before dropping the connection
)

// Options configure the WebSocket API. Zero fields take the defaults.
type Options struct {
	// Requests is the Host and Origin check of the handshake (the zero
	// value: loopback Hosts, no browser Origin).
	Requests auth.RequestPolicy
	// MaxMessageBytes bounds an incoming message; a bigger one closes the
	// connection with 1009.
	MaxMessageBytes int64
	// QueueMessages and QueueBytes bound each connection's outbound queue.
	// Session output takes at most OutputBytes and OutputMessages of it
	// (defaults 8 MiB, capped at half of QueueBytes, and half of
	// QueueMessages): output beyond that is withheld from the connection
	// and replaced by a stream.gap notice once the client has read the
	// queue down to half of them; the client reads the gap back from the
	// session's replay ring (stream.read). A reply waits up to ReplyWait
	// (default one minute) for room in the queue; a client that leaves
	// a reply without room that long does not read at all and is
	// disconnected with 1008. Memory never grows with a slow reader.
	QueueMessages  int
	QueueBytes     int64
	OutputBytes    int64
	OutputMessages int
	ReplyWait      time.Duration
	// MaxInFlight bounds concurrent requests per connection; more are
	// refused with a busy error.
	MaxInFlight int
	// MaxInFlightBytes bounds the bytes of the requests running on one
	// connection, MaxTotalInFlightBytes on all of them (a running request
	// keeps its params); more are refused with a busy error. A request
	// alone on its connection is always admitted by the first bound.
	// Defaults: 4 and 16 times MaxMessageBytes.
	MaxInFlightBytes      int64
	MaxTotalInFlightBytes int64
	// WriteTimeout bounds one write of a control frame (ping, close) to
	// the socket; a message may take max(WriteTimeout, ReplyWait).
	WriteTimeout time.Duration
	// PingInterval is how often the server pings; a peer silent for two
	// intervals is dropped.
	PingInterval time.Duration
	// MaxConnections caps open connections.
	MaxConnections int
}

func (o *Options) setDefaults() {
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.QueueMessages <= 0 {
		o.QueueMessages = DefaultQueueMessages
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.OutputBytes <= 0 {
		o.OutputBytes = DefaultOutputBytes
	}
	o.OutputBytes = max(1, min(o.OutputBytes, o.QueueBytes/2))
	if o.OutputMessages <= 0 {
		o.OutputMessages = o.QueueMessages / 2
	}
	o.OutputMessages = max(2, min(o.OutputMessages, o.QueueMessages/2))
	if o.ReplyWait <= 0 {
		o.ReplyWait = DefaultReplyWait
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = 4 * o.MaxMessageBytes
	}
	if o.MaxTotalInFlightBytes <= 0 {
		o.MaxTotalInFlightBytes = 16 * o.MaxMessageBytes
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
}

// testHookUpgraded, if set (tests), runs between the upgrade and the
// connection's registration.
var testHookUpgraded func()

// testHookShutdown, if set (tests), runs once Shutdown has taken its
// snapshot of the connections.
var testHookShutdown func()

// Handler is the http.Handler of /v1/ws. Host and Origin are checked by the
// server's middleware before it runs; it authenticates the bearer token.
type Handler struct {
	core     *core.Core
	opts     Options
	log      *slog.Logger
	upgrader websocket.Upgrader

	mu    sync.Mutex
	conns map[*conn]struct{}
	wg    sync.WaitGroup
	shut  bool

	inflightBytes atomic.Int64 // of the requests running on all connections
}

// New returns the WebSocket handler.
func New(c *core.Core, opts Options) *Handler {
	opts.setDefaults()
	return &Handler{
		core: c,
		opts: opts,
		log:  c.Logger().With("component", "wsapi"),
		upgrader: websocket.Upgrader{
			HandshakeTimeout: handshakeTimeout,
			ReadBufferSize:   4 << 10,
			WriteBufferSize:  16 << 10,
			WriteBufferPool:  &sync.Pool{},
			Subprotocols:     []string{wsproto.Subprotocol},
			// The server's middleware has already checked Host and Origin
			// (so has ServeHTTP); gorilla's default check would be weaker.
			CheckOrigin: func(r *http.Request) bool { return opts.Requests.Origins.CheckRequest(r.Header.Get("Origin"), r.Host) },
			// permessage-deflate stays off (CRIME/BREACH-style leaks).
			EnableCompression: false,
		},
		conns: map[*conn]struct{}{},
	}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Repeats the server's check, so that this handler is never open to
	// DNS rebinding or other origins wherever it is mounted.
	if code, msg := h.opts.Requests.Check(r); code != "" {
		h.core.Metrics().Error(code, "ws")
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		http.Error(w, "this endpoint speaks WebSocket (JSON-RPC 2.0, subprotocol "+wsproto.Subprotocol+")", http.StatusBadRequest)
		return
	}
	p, err := h.core.Authenticate(auth.Bearer(r))
	if err != nil {
		h.log.Warn("websocket auth failed", "remote", r.RemoteAddr, "err", err)
		h.core.Metrics().Error(apierr.KindOf(err).String(), "ws")
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	h.mu.Lock()
	switch {
	case h.shut || h.core.Draining():
		h.mu.Unlock()
		http.Error(w, "the server is shutting down", http.StatusServiceUnavailable)
		return
	case len(h.conns) >= h.opts.MaxConnections:
		h.mu.Unlock()
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many WebSocket connections", http.StatusTooManyRequests)
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()

	ws, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	if testHookUpgraded != nil {
		testHookUpgraded()
	}
	c := newConn(h, ws, p, r.RemoteAddr)
	h.mu.Lock()
	h.conns[c] = struct{}{}
	shut := h.shut
	h.mu.Unlock()
	if shut {
		// Shutdown began during the upgrade and did not see this
		// connection: close it here, or Shutdown would wait for it.
		c.close(websocket.CloseGoingAway, "server shutting down")
	}
	h.core.Metrics().WSConnections.Inc()
	h.log.Info("websocket connected", "conn", c.id, "remote", r.RemoteAddr, "operator", p.Operator)
	c.serve()
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
	h.core.Metrics().WSConnections.Dec()
	h.log.Info("websocket disconnected", "conn", c.id, "reason", c.closeReason())
}

// Shutdown closes every connection with 1001 (going away) and waits for
// their goroutines, or ctx. New connections are refused from now on. If
// ctx ends first, the error names each connection still open and what it
// waits for (the log has the same, one line a connection).
func (h *Handler) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.shut = true
	conns := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	if testHookShutdown != nil {
		testHookShutdown()
	}
	for _, c := range conns {
		go c.shutdown(ctx)
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return h.stuck(ctx.Err())
	}
}

// stuck reports the connections Shutdown still waits for when err (its
// deadline) ended the wait: a shutdown that cannot finish says why.
func (h *Handler) stuck(err error) error {
	h.mu.Lock()
	states := make([]string, 0, len(h.conns))
	for c := range h.conns {
		states = append(states, c.state())
	}
	h.mu.Unlock()
	slices.Sort(states)
	for _, s := range states {
		h.log.Warn("shutdown: a connection is still open", "state", s)
	}
	if len(states) == 0 {
		return fmt.Errorf("%w: waiting for a connection being upgraded", err)
	}
	return fmt.Errorf("%w: %d connections still open: %s", err, len(states), strings.Join(states, "; "))
}
