package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/transport/websocket"
	"k8s.io/streaming/pkg/httpstream"
)

// ExecFunc runs cmd in a container of a Pod over pods/exec with stdin and
// stdout (no TTY) and returns them as one stream; Close ends the exec.
// stderr of the command is kept bounded for errors.
//
// ctx bounds the setup only (until the server has upgraded the
// connection); the stream then lives until Close or until the command
// ends, as a Docker exec stream does. Reads return the command's stdout,
// then io.EOF when it exited 0, or an error naming the exit code (an
// errors.As target of k8s.io/client-go/util/exec.CodeExitError) and the
// tail of its stderr. The stream also has CloseWrite, which closes the
// command's stdin and keeps reading.
type ExecFunc func(ctx context.Context, namespace, pod, container string, cmd []string) (io.ReadWriteCloser, error)

// MaxExecStderr bounds how much of an exec'd command's stderr is kept (its
// last bytes) to be named in the stream's error: the command runs in a
// sandbox, so its stderr is hostile and could be endless.
const MaxExecStderr = 4 << 10

// Protocols an exec stream can be carried by, as Protocol reports them.
const (
	ProtocolWebSocket = "websocket" // v5.channel.k8s.io over a WebSocket
	ProtocolSPDY      = "spdy"      // the v4 channel protocol over SPDY/3.1
)

// NewExec returns the ExecFunc of a cluster: WebSocket (v5) first, SPDY
// fallback decided with k8s.io/streaming/pkg/httpstream.IsUpgradeFailure.
//
// Since client-go 0.36 the WebSocket transport returns the
// k8s.io/streaming UpgradeFailureError, which apimachinery's
// IsUpgradeFailure no longer matches: with that one the fallback would
// silently never fire (decision 0044).
func NewExec(cfg *rest.Config) (ExecFunc, error) {
	if cfg == nil {
		return nil, errors.New("kubernetes exec: no REST config")
	}
	if cfg.Host == "" {
		return nil, errors.New("kubernetes exec: the REST config has no host")
	}
	base := rest.CopyConfig(cfg)
	base.APIPath = "/api"
	base.GroupVersion = &schema.GroupVersion{Version: "v1"}
	host, apiPath, err := rest.DefaultServerUrlFor(base)
	if err != nil {
		return nil, fmt.Errorf("kubernetes exec: %w", err)
	}
	// Both transports are built once here so that a config they cannot
	// use (bad TLS files, basic and token auth at once) fails now, not on
	// the first exec.
	if _, _, err := websocket.RoundTripperFor(base); err != nil {
		return nil, fmt.Errorf("kubernetes exec: WebSocket transport: %w", err)
	}
	if _, _, err := spdy.RoundTripperFor(base); err != nil {
		return nil, fmt.Errorf("kubernetes exec: SPDY transport: %w", err)
	}
	return func(ctx context.Context, namespace, pod, container string, cmd []string) (io.ReadWriteCloser, error) {
		if ctx == nil {
			return nil, errors.New("kubernetes exec: nil context")
		}
		if err := validateExec(namespace, pod, container, cmd); err != nil {
			return nil, err
		}
		u := *host
		u.Path = path.Join(u.Path, apiPath, "namespaces", namespace, "pods", pod, "exec")
		q := url.Values{"container": {container}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
		q["command"] = cmd
		u.RawQuery = q.Encode()
		return startExec(ctx, base, &u, fmt.Sprintf("%s/%s/%s", namespace, pod, container))
	}, nil
}

func validateExec(namespace, pod, container string, cmd []string) error {
	for _, c := range []struct {
		what, v string
		check   func(string) []string
	}{
		{"namespace", namespace, validation.IsDNS1123Label},
		{"pod", pod, validation.IsDNS1123Subdomain},
		{"container", container, validation.IsDNS1123Label},
	} {
		if errs := c.check(c.v); len(errs) > 0 {
			return fmt.Errorf("kubernetes exec: %s %q: %s", c.what, c.v, strings.Join(errs, "; "))
		}
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return errors.New("kubernetes exec: empty command")
	}
	for _, a := range cmd {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("kubernetes exec: command argument %q contains a NUL byte", a)
		}
	}
	return nil
}

// startExec runs one exec. Executors are made per call: client-go's are
// not safe for concurrent streams.
func startExec(ctx context.Context, base *rest.Config, u *url.URL, target string) (*execStream, error) {
	s := &execStream{target: target, done: make(chan struct{}), upgraded: make(chan struct{})}
	cfg := rest.CopyConfig(base)
	cfg.WrapTransport = transport.Wrappers(cfg.WrapTransport, s.observe)

	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return nil, fmt.Errorf("kubernetes exec %s: %w", target, err)
	}
	sp, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return nil, fmt.Errorf("kubernetes exec %s: %w", target, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, sp, httpstream.IsUpgradeFailure)
	if err != nil {
		return nil, fmt.Errorf("kubernetes exec %s: %w", target, err)
	}

	stdin, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	s.stdin, s.stdinR, s.stdout, s.stdoutW = stdinW, stdin, stdoutR, stdoutW
	// The stream outlives ctx (it bounds the setup only) but keeps its
	// values; Close cancels it.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go func() {
		defer close(s.done)
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdoutW, Stderr: &s.stderr})
		s.err = s.wrap(err)
		end := s.err
		if end == nil {
			end = errExecEnded
		}
		// Data the command wrote before it ended is still read first: a
		// pipe hands the close to the reader only after the last write.
		stdoutW.CloseWithError(s.err)
		stdin.CloseWithError(end)
	}()

	select {
	case <-s.upgraded:
		return s, nil
	case <-s.done:
		if s.err != nil {
			s.cancel()
			return nil, s.err
		}
		// The command ran and ended before the upgrade was seen: nothing is
		// lost, its output is in the pipe.
		return s, nil
	case <-ctx.Done():
		_ = s.Close() // always nil; it waits for the goroutine
		return nil, fmt.Errorf("kubernetes exec %s: %w", target, ctx.Err())
	}
}

// errExecEnded is what a Write returns once the exec'd command has ended.
var errExecEnded = errors.New("kubernetes exec: the command has ended")

// execStream is one pods/exec: Write feeds the command's stdin, Read
// returns its stdout.
type execStream struct {
	target  string
	stdin   *io.PipeWriter // Write's end of the command's stdin
	stdinR  *io.PipeReader // the executor's end
	stdout  *io.PipeReader // Read's end of the command's stdout
	stdoutW *io.PipeWriter // the executor's end
	stderr  tailBuffer
	cancel  context.CancelFunc

	upgradeOnce sync.Once
	upgraded    chan struct{} // closed when the server switched protocols
	proto       string        // set before upgraded is closed

	done chan struct{} // the streaming goroutine has ended
	err  error         // set before done is closed

	closeOnce sync.Once
}

func (s *execStream) Read(p []byte) (int, error)  { return s.stdout.Read(p) }
func (s *execStream) Write(p []byte) (int, error) { return s.stdin.Write(p) }

// CloseWrite closes the command's stdin; its stdout stays readable.
func (s *execStream) CloseWrite() error { return s.stdin.Close() }

// Close ends the exec (the command sees its stream go away) and waits for
// the streaming goroutine. Reads and writes after Close fail.
func (s *execStream) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		// The executor's ends: Read and Write then fail with
		// net.ErrClosed, and the executor's copies stop.
		s.stdoutW.CloseWithError(net.ErrClosed)
		s.stdinR.CloseWithError(net.ErrClosed)
	})
	<-s.done
	return nil
}

// Protocol reports which protocol carried the stream: ProtocolWebSocket
// or ProtocolSPDY ("" if the command ended before an upgrade was seen).
func (s *execStream) Protocol() string {
	select {
	case <-s.upgraded:
		return s.proto
	default:
		return ""
	}
}

// Err is the stream's end: nil while it runs or when the command exited 0.
func (s *execStream) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// observe wraps the exec transports to see the server switch protocols:
// from then on the stream exists and setup is over.
func (s *execStream) observe(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
			proto := ProtocolSPDY
			if strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
				// A WebSocket upgrade to another subprotocol than v5 is an
				// upgrade failure: the SPDY fallback comes next.
				if resp.Header.Get("Sec-WebSocket-Protocol") != protocolV5 {
					return resp, err
				}
				proto = ProtocolWebSocket
			}
			s.upgradeOnce.Do(func() {
				s.proto = proto
				close(s.upgraded)
			})
		}
		return resp, err
	})
}

// wrap names the target and the command's stderr in err.
func (s *execStream) wrap(err error) error {
	if err == nil {
		return nil
	}
	if tail := s.stderr.String(); tail != "" {
		return fmt.Errorf("kubernetes exec %s: %w (stderr: %q)", s.target, err, tail)
	}
	return fmt.Errorf("kubernetes exec %s: %w", s.target, err)
}

// protocolV5 is the only WebSocket subprotocol NewWebSocketExecutor asks for.
const protocolV5 = "v5.channel.k8s.io"

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// tailBuffer keeps the last MaxExecStderr bytes written to it.
type tailBuffer struct {
	mu        sync.Mutex
	buf       []byte
	truncated bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) >= MaxExecStderr {
		p = p[len(p)-MaxExecStderr:]
		b.buf = b.buf[:0]
		b.truncated = true
	} else if over := len(b.buf) + len(p) - MaxExecStderr; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.truncated = true
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(string(b.buf))
	if b.truncated && s != "" {
		return "…" + s
	}
	return s
}
