package server

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
)

// guard refuses, before anything else runs, requests whose Host is not an
// allowed name (DNS rebinding) or whose Origin is a browser origin not
// allowed. Unix-socket requests skip the Host check: no browser reaches one.
func (s *Server) guard(next http.Handler) http.Handler {
	policy := s.opts.requestPolicy()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, msg := policy.Check(r); code != "" {
			s.refuse(w, r, http.StatusForbidden, code, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// operatorOnly requires the operator token (for /metrics and /mcp).
func (s *Server) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.core.Authenticate(auth.Bearer(r))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
			s.refuse(w, r, http.StatusUnauthorized, apierr.KindOf(err).String(), err.Error())
			return
		}
		if !p.Operator {
			s.refuse(w, r, http.StatusForbidden, apierr.PermissionDenied.String(), "this endpoint needs the operator token, not a session token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	s.log.Warn("request refused", "path", r.URL.Path, "remote", r.RemoteAddr, "status", status, "code", code)
	transport := "http"
	switch {
	case r.URL.Path == "/mcp" || strings.HasPrefix(r.URL.Path, "/mcp/"):
		transport = "mcp"
	case r.URL.Path == "/v1/ws":
		transport = "ws"
	}
	s.core.Metrics().Error(code, transport)
	http.Error(w, msg, status)
}

// bodyDeadline bounds the time a client may take to send a request body, on
// every route and before any check: without it a client that announces a
// body and trickles it (or never sends it) holds a connection and a
// goroutine for ever, since net/http reads what the handler left unread
// before it answers, with no deadline of its own (no ReadTimeout: see
// New). The deadline is lifted once the body has been read to its end, so
// that the response of a long MCP call or stream is not cut.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	timeout := s.opts.BodyReadTimeout
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the connection's read deadline when the body ends.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}
