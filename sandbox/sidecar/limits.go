package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/sandboxd/sandboxd/tools"
)

// What an MCP sidecar can make the daemon hold or do. A sidecar runs a
// third party's server: everything it sends is hostile input
// (attacks-2026-11b M5-M14), bounded here whatever the SDK does by default.
const (
	// MaxMessage bounds one message from a sidecar: a stdio line, an HTTP
	// response body, a server-sent event.
	MaxMessage = 16 << 20
	// MaxTools, MaxToolBytes and MaxListBytes bound a sidecar's tool
	// list: how many, one tool's JSON (name, description, schemas), and
	// all of them together; MaxPages bounds the pages of tools/list. A
	// server over any of them does not start, saying which.
	MaxTools     = 1000
	MaxToolBytes = 64 << 10
	MaxListBytes = 4 << 20
	MaxPages     = 100
	// MaxResultChars bounds the text of one result, as the terminal's
	// output is bounded; past it the middle is cut, saying so.
	MaxResultChars = 30000
	// MaxResultBinary bounds the image and audio bytes of one result.
	MaxResultBinary = 8 << 20
	// CallTimeout is the deadline of one sidecar tool call.
	CallTimeout = 10 * time.Minute
	// cancelGrace is how long a cancelled call waits for the SDK to give
	// it up before it returns anyway (the protocol promises 3 s).
	cancelGrace = 500 * time.Millisecond
	// relistEvery spaces the re-reads of a sidecar's tools after
	// notifications/tools/list_changed: at most one in flight, one
	// pending, and one started per this interval.
	relistEvery = time.Second
	// A sidecar may send sandboxd requests (ping; roots, sampling and
	// elicitation are refused: sandboxd offers none) at this rate after a
	// burst; one that sends more is cut off as flooding.
	requestBurst = 32
	requestRate  = 10
)

// errFlood is why a flooding sidecar was cut off.
var errFlood = errors.New("it sent sandboxd requests faster than " +
	fmt.Sprint(requestRate) + " a second (sandboxd answers ping and offers MCP servers no roots, sampling or elicitation): its connection was closed")

// limitedBodies is an http.RoundTripper that bounds what a sidecar's
// replies make the daemon read (M13: the SDK reads a JSON body whole with
// io.ReadAll, and one 1 GiB reply took the daemon to 9 GB). A JSON reply
// is read here, up to MaxMessage: past it, reading stops and the
// reply becomes a JSON-RPC error for the request's id, so that call fails
// saying why and the connection stays up. Other bodies (an event stream,
// whose events the SDK bounds one by one with MaxEventSize) end in an
// error past MaxMessage.
type limitedBodies struct{ base http.RoundTripper }

func (l limitedBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		return resp, nil
	}
	if mt != "application/json" {
		resp.Body = &limitedBody{rc: resp.Body, left: MaxMessage}
		return resp, nil
	}
	var body []byte
	if resp.ContentLength <= MaxMessage {
		body, err = io.ReadAll(io.LimitReader(resp.Body, MaxMessage+1))
	}
	_ = resp.Body.Close() // stops a sender past the limit at once
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > MaxMessage || len(body) > MaxMessage {
		body = tooLargeReply(req, resp.ContentLength)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// tooLargeReply is the JSON-RPC error that replaces a reply over the
// limit: for the request's id when it has one, else (a notification or a
// batch) a body the SDK fails on, ending the connection.
func tooLargeReply(req *http.Request, n int64) []byte {
	what := "more than"
	if n > 0 {
		what = fmt.Sprintf("%d MiB, more than", n>>20)
	}
	msg := fmt.Sprintf("sandboxd: the server's reply is %s the limit of %d MiB a message; it was not read", what, MaxMessage>>20)
	var call struct {
		ID json.RawMessage `json:"id"`
	}
	if req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			_ = json.NewDecoder(io.LimitReader(rc, MaxMessage)).Decode(&call)
			_ = rc.Close()
		}
	}
	if len(call.ID) == 0 || string(call.ID) == "null" {
		return []byte(msg)
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": call.ID,
		"error": map[string]any{"code": jsonrpc.CodeInternalError, "message": msg}})
	if err != nil {
		return []byte(msg)
	}
	return b
}

// limitedBody reads at most left bytes, then fails.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		_ = b.rc.Close() // stop the sender at once
		return 0, fmt.Errorf("its HTTP reply is more than the limit of %d MiB a message", MaxMessage>>20)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// guard is the receiving middleware of a sidecar's client session over
// conn: what the server sends that is not an answer. Notifications pass
// (tool list changes are coalesced by relist); requests are rate-limited,
// and a server past the rate is cut off: sandboxd answers ping and
// refuses the rest at once (M8: a flood of roots/list,
// sampling/createMessage and ping grew the daemon's goroutines without
// bound). It is bound to its conn, not to the sidecar's current session,
// so a flood that starts while the session is still being set up (before
// it is the current one) is cut off too.
func (c *sidecar) guard(conn *Conn) mcp.Middleware {
	var cut atomic.Bool
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasPrefix(method, "notifications/") {
				return next(ctx, method, req)
			}
			if !c.requests.Allow() {
				if cut.CompareAndSwap(false, true) {
					c.cutOff(req, conn)
				}
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sandboxd: too many requests; disconnecting"}
			}
			if method == "ping" {
				return next(ctx, method, req)
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("sandboxd offers MCP servers no %.64s", method)}
		}
	}
}

// cutOff closes a flooding sidecar's transport and client session; its
// start or its watcher then says why it went down (floodedOn).
func (c *sidecar) cutOff(req mcp.Request, conn *Conn) {
	c.mu.Lock()
	c.flooded = conn
	c.mu.Unlock()
	c.log.Warn("mcp sidecar cut off", "err", errFlood)
	cs, _ := req.GetSession().(*mcp.ClientSession)
	go func() {
		// The transport first: a server that never reads holds every
		// answer's write, and the client session's Close waits for them
		// (it hung so while the flood went on: +5,285 goroutines in 20 s
		// under load). Closing the stream fails those writes and stops
		// the reading.
		if conn.Close != nil {
			conn.Close()
		}
		if cs != nil {
			_ = cs.Close()
		}
	}()
}

// floodedOn reports whether conn was cut off for flooding.
func (c *sidecar) floodedOn(conn *Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flooded != nil && c.flooded == conn
}

// newRequestLimiter is a sidecar's budget of requests to sandboxd.
func newRequestLimiter() *rate.Limiter {
	return rate.NewLimiter(requestRate, requestBurst)
}

// relister coalesces a sidecar's re-reads of its tools (M7: one goroutine
// and a 30 s re-read per notifications/tools/list_changed made 34,000
// goroutines and 13 MB of log in 45 s): at most one re-read in flight and
// one pending, started at most once per relistEvery.
type relister struct {
	mu      sync.Mutex
	running bool
	again   bool
}

// request asks for a re-read; run is started unless one is in flight, in
// which case one more follows it.
func (r *relister) request(run func()) {
	r.mu.Lock()
	if r.running {
		r.again = true
		r.mu.Unlock()
		return
	}
	r.running = true
	r.mu.Unlock()
	go r.loop(run)
}

func (r *relister) loop(run func()) {
	for {
		began := time.Now()
		run()
		r.mu.Lock()
		if !r.again {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.again = false
		r.mu.Unlock()
		if wait := relistEvery - time.Since(began); wait > 0 {
			time.Sleep(wait)
		}
	}
}

// listTools reads every page of a server's tools and names them for
// the session, within the list limits.
func listTools(ctx context.Context, server string, cs *mcp.ClientSession) ([]tools.Definition, map[string]string, error) {
	defs := []tools.Definition{}
	orig := map[string]string{}
	total := 0
	var cursor string
	for page := 1; ; page++ {
		if page > MaxPages {
			return nil, nil, fmt.Errorf("its tools/list has more than %d pages, the limit", MaxPages)
		}
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, nil, err
		}
		for _, t := range res.Tools {
			if len(defs) == MaxTools {
				return nil, nil, fmt.Errorf("it lists more than %d tools, the limit", MaxTools)
			}
			b, err := json.Marshal(t)
			if err != nil {
				return nil, nil, fmt.Errorf("tool %.64q: %w", t.Name, err)
			}
			if len(b) > MaxToolBytes {
				return nil, nil, fmt.Errorf("its tool %.64q is %d bytes of JSON, above the limit of %d KiB a tool", t.Name, len(b), MaxToolBytes>>10)
			}
			if total += len(b); total > MaxListBytes {
				return nil, nil, fmt.Errorf("its tools are more than %d MiB of JSON together, the limit (%d tools so far)", MaxListBytes>>20, len(defs))
			}
			d, err := fromMCPTool(server, t)
			if err != nil {
				return nil, nil, err
			}
			if prev, ok := orig[d.Name]; ok {
				return nil, nil, fmt.Errorf("its tools %q and %q are both exposed as %q", prev, t.Name, d.Name)
			}
			orig[d.Name] = t.Name
			defs = append(defs, d)
		}
		if res.NextCursor == "" {
			return defs, orig, nil
		}
		cursor = res.NextCursor
	}
}

// boundResult cuts an observation from a sidecar to the result limits:
// text past MaxResultChars loses its middle, images and audio past
// MaxResultBinary are left out, and structured content clients
// could not take (tools.CheckStructured) is left out; each says so in a
// note the model reads (M12, K12).
func boundResult(server string, obs *tools.Observation) *tools.Observation {
	var notes []string
	if obs.Structured != nil {
		if err := tools.CheckStructured(obs.Structured); err != nil {
			obs.Structured = nil
			notes = append(notes, fmt.Sprintf("its structured content is left out: %v", err))
		}
	}
	chars, binary := 0, 0
	for _, c := range obs.Content {
		chars += utf8.RuneCountInString(c.Text)
		binary += len(c.Data)
	}
	if binary > MaxResultBinary {
		kept := obs.Content[:0]
		for _, c := range obs.Content {
			if len(c.Data) == 0 {
				kept = append(kept, c)
			}
		}
		obs.Content = kept
		notes = append(notes, fmt.Sprintf("its images and audio (%d MiB) are left out, above the limit of %d MiB a result", binary>>20, MaxResultBinary>>20))
	}
	if chars > MaxResultChars {
		obs.Content = cutText(obs.Content, chars)
		notes = append(notes, fmt.Sprintf("its text was %d characters: the middle was cut to keep %d, the limit of a result", chars, MaxResultChars))
	}
	if len(notes) > 0 {
		obs.Content = append(obs.Content, tools.Content{Type: "text",
			Text: fmt.Sprintf("\n[sandboxd: mcp server %q's result was cut: %s.]", server, strings.Join(notes, "; "))})
	}
	return obs
}

// cutText keeps the first and last MaxResultChars/2 characters of
// the text blocks (of chars in all, more than MaxResultChars),
// dropping the text between and marking the cut once.
func cutText(content []tools.Content, chars int) []tools.Content {
	head, tail := MaxResultChars/2, MaxResultChars-MaxResultChars/2
	out := make([]tools.Content, 0, len(content))
	pos, marked := 0, false // pos: characters of text before this block
	for _, c := range content {
		if c.Type != "text" || c.Text == "" {
			out = append(out, c)
			continue
		}
		n := utf8.RuneCountInString(c.Text)
		from, to := pos, pos+n
		pos = to
		var b strings.Builder
		if from < head {
			b.WriteString(runes(c.Text, 0, min(n, head-from)))
		}
		if !marked && from < chars-tail && to > head { // the cut [head, chars-tail) meets this block
			b.WriteString("\n[...]\n")
			marked = true
		}
		if to > chars-tail {
			b.WriteString(runes(c.Text, max(0, chars-tail-from), n))
		}
		if b.Len() > 0 {
			c.Text = b.String()
			out = append(out, c)
		}
	}
	return out
}

// runes is s's characters [i, j).
func runes(s string, i, j int) string {
	if i >= j {
		return ""
	}
	start, end, n := len(s), len(s), 0
	for off := range s {
		if n == i {
			start = off
		}
		if n == j {
			end = off
			break
		}
		n++
	}
	return s[start:end]
}
