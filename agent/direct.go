package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// Bounds of the agent's side of the direct path (its wire is in package
// proto).
const (
	// maxDirectPath bounds the path of a direct/dial: a unix socket address
	// holds 107 bytes.
	maxDirectPath = 107
	// DirectDialTimeout bounds the agent's dial and hello write.
	DirectDialTimeout = 5 * time.Second
)

// handleDirectDial dials the host's socket, presents the token and serves
// the connection on this server (its calls share the toolset and bounds).
func handleDirectDial(ctx context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.DirectParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(p.Path) || len(p.Path) > maxDirectPath {
		return nil, fmt.Errorf("%w: path %q must be absolute and at most %d bytes", proto.ErrInvalidParams, p.Path, maxDirectPath)
	}
	if !proto.ValidDirectToken(p.Token) {
		return nil, fmt.Errorf("%w: token must be %d hex characters", proto.ErrInvalidParams, 2*proto.DirectTokenBytes)
	}
	ctx, cancel := context.WithTimeout(ctx, DirectDialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", p.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: dialling %s: %v", proto.ErrDirect, p.Path, err)
	}
	raw, _ := json.Marshal(proto.HelloParams{Token: p.Token}) // strings only: cannot fail
	buf, err := proto.EncodeFrame(&proto.Frame{Method: proto.MethodDirectHello, Params: raw})
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	_ = nc.SetWriteDeadline(time.Now().Add(DirectDialTimeout)) // a unix conn always takes deadlines
	if _, err := nc.Write(buf); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("%w: writing the hello: %v", proto.ErrDirect, err)
	}
	_ = nc.SetWriteDeadline(time.Time{})
	c.log.Info("direct connection to the host made", "path", p.Path)
	// Served like a socket client: it ends when the host closes it or the
	// server shuts down (which closes every connection).
	go func() { _ = c.s.serveDirect(context.Background(), nc) }()
	return struct{}{}, nil
}
