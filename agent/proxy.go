package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
)

// Proxy bridges in/out to the unix socket of a running agent (Run with a
// Socket), so the host reaches the agent through a `docker exec -i` stream,
// e.g. after a daemon restart. It returns when the agent closes the
// connection (nil), ctx ends (nil), or relaying from the agent fails.
func Proxy(ctx context.Context, socket string, in io.Reader, out io.Writer) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no agent socket at %s; is 'sandboxd agent --socket %s' running in this container?", socket, socket)
		}
		return fmt.Errorf("connecting to the agent at %s: %w", socket, err)
	}
	uc := conn.(*net.UnixConn)
	// Closing is how the relay is stopped; its error (already closed)
	// means nothing here.
	stop := context.AfterFunc(ctx, func() { _ = uc.Close() })
	defer stop()

	// host -> agent: at the end of in, half-close so the agent sees EOF
	// and ends the connection, which ends the copy below. A failed copy
	// (the agent hung up) ends the same way, and the direction that
	// decides the outcome is agent -> host.
	go func() {
		_, _ = io.Copy(uc, in)
		_ = uc.CloseWrite()
	}()
	// agent -> host: the proxy's lifetime.
	_, err = io.Copy(out, uc)
	_ = uc.Close() // done with it either way; err below is the one that matters
	if err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("relaying from the agent: %w", err)
	}
	return nil
}
