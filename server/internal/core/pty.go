package core

import (
	"context"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
)

// OpenPTY opens a PTY in the session's sandbox (see Sandbox.OpenPTY);
// refused while the server drains. A PTY is not a call: the drain does not
// wait for it. It belongs to the API connection that opened it, which
// closes it when it ends (and the server's shutdown ends connections).
func (s *Session) OpenPTY(ctx context.Context, o proto.PTYOptions, h agentclient.PTYHandler) (PTY, error) {
	s.c.mu.Lock()
	refused := s.c.draining || s.c.closed
	s.c.mu.Unlock()
	if refused {
		return nil, apierr.New(apierr.Unavailable, "the server is shutting down")
	}
	if err := o.Validate(); err != nil {
		return nil, apierr.Wrap(apierr.InvalidParams, err, "invalid pty options")
	}
	return s.sb.OpenPTY(ctx, o, h)
}
