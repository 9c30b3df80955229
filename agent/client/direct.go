package agentclient

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// Bounds of the host's side of the direct path (its wire is in package
// proto).
const (
	// maxHelloSize bounds the first frame the host reads from a direct
	// connection: a hello is under 120 bytes; anything larger is not one.
	maxHelloSize = 256
	// DirectHelloTimeout is how long the host waits for an accepted
	// connection's hello before dropping it.
	DirectHelloTimeout = 2 * time.Second
	// directCandidates bounds the accepted connections whose hello is
	// awaited at once; more are dropped at once (only code in the sandbox
	// would open them).
	directCandidates = 4
)

// NewDirectToken returns a fresh random token for one direct/dial.
func NewDirectToken() (string, error) {
	var b [proto.DirectTokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("%w: generating a token: %v", proto.ErrDirect, err)
	}
	return hex.EncodeToString(b[:]), nil
}

// DialDirect asks the agent to dial the host's socket at path (as the
// sandbox sees it) and present token; it returns once the agent has
// written its hello (or failed to).
func (c *Client) DialDirect(ctx context.Context, path, token string) error {
	_, err := c.roundTrip(ctx, proto.MethodDirectDial, proto.DirectParams{Path: path, Token: token}, nil)
	return err
}

// AcceptDirect accepts connections on ln until one presents token as its
// first frame, and returns it; every other connection is closed (no hello
// within DirectHelloTimeout, a frame that is not a hello, another token).
// It returns an error wrapping ErrDirect when ctx ends first. ln is closed
// when AcceptDirect returns (its Close is how a blocked Accept is ended).
func AcceptDirect(ctx context.Context, ln net.Listener, token string) (net.Conn, error) {
	if !proto.ValidDirectToken(token) {
		return nil, fmt.Errorf("%w: invalid token", proto.ErrDirect)
	}
	var (
		won     = make(chan net.Conn, 1)
		wg      sync.WaitGroup
		mu      sync.Mutex
		checked = 0 // candidates being checked now
	)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer func() {
		cancel()
		stop()
		_ = ln.Close()
		wg.Wait()
	}()
	acceptErr := make(chan error, 1)
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			mu.Lock()
			full := checked >= directCandidates
			if !full {
				checked++
			}
			mu.Unlock()
			if full {
				_ = nc.Close()
				continue
			}
			wg.Go(func() {
				defer func() { mu.Lock(); checked--; mu.Unlock() }()
				stopConn := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Unix(1, 0)) })
				err := readHello(nc, token, time.Now().Add(DirectHelloTimeout))
				stopConn()
				if err == nil && ctx.Err() == nil {
					select {
					case won <- nc:
						cancel()
						return
					default:
					}
				}
				_ = nc.Close()
			})
		}
	})
	select {
	case nc := <-won:
		return nc, nil
	case <-ctx.Done():
		select {
		case nc := <-won:
			return nc, nil
		default:
		}
		return nil, fmt.Errorf("%w: no connection presented the token: %v", proto.ErrDirect, context.Cause(ctx))
	case err := <-acceptErr:
		select {
		case nc := <-won: // the winner closed the listener after winning
			return nc, nil
		default:
		}
		return nil, fmt.Errorf("%w: accepting: %v", proto.ErrDirect, err)
	}
}

// errBadHello is why a candidate connection was dropped.
var errBadHello = errors.New("not a hello with the token")

// readHello reads the first frame of nc, bounded in size and time, and
// checks it is a hello that carries token. It reads exactly one frame, so
// nothing after it is consumed.
func readHello(nc net.Conn, token string, deadline time.Time) error {
	if err := nc.SetReadDeadline(deadline); err != nil {
		return err
	}
	var hdr [proto.HeaderSize]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n&proto.BinaryFlag != 0 || n > maxHelloSize {
		return fmt.Errorf("%w: a first frame of header %#x", errBadHello, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(nc, body); err != nil {
		return err
	}
	var f proto.Frame
	if err := json.Unmarshal(body, &f); err != nil || f.Method != proto.MethodDirectHello || f.ID != 0 {
		return errBadHello
	}
	var p proto.HelloParams
	if err := json.Unmarshal(f.Params, &p); err != nil {
		return errBadHello
	}
	if subtle.ConstantTimeCompare([]byte(p.Token), []byte(token)) != 1 {
		return errBadHello
	}
	return nc.SetReadDeadline(time.Time{})
}
