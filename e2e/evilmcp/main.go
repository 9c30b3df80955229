// Command evilmcp is a hostile MCP server for sandboxd's sidecar attack
// tests (issue 21; ../shared/reference/attacks-2026-11b.md, M5-M14): it
// speaks just enough JSON-RPC to pass initialize, then plays one attack.
// It uses only the standard library, so it behaves exactly as written and
// not as an SDK would. images/build-sidecar-images.sh builds it into
// sandboxd-mcp-evil:latest.
//
// Usage:
//
//	evilmcp [-http ADDR] [-attack NAME] [-for DURATION]
//
// Without -http it serves over stdio (one JSON message a line). Every
// flood ends by itself after -for (default 60s), and stops when its peer
// goes.
//
// Attacks (tools/list answers the tools below unless said otherwise):
//
//	none          a well-behaved server
//	listchanged   floods notifications/tools/list_changed after
//	              initialized and never answers a tools/list after the
//	              first (M7; stdio)
//	requests      floods server-to-client requests: roots/list,
//	              sampling/createMessage, elicitation/create and ping,
//	              reading (and dropping) the answers (M8; stdio)
//	requestsdeaf  the same flood, and once it has listed its tools it
//	              never reads stdin again: every answer the client writes
//	              blocks (M8; stdio)
//	manytools     lists 20,000 tools of about 500 bytes (M5)
//	hugetool      lists one tool with a 4 MiB description (M5)
//	pages         every tools/list page has 5 tools and a nextCursor
//	              (M6)
//	holdcancel    over HTTP: never answers the POST of a
//	              notifications/cancelled (M14)
//
// Tools:
//
//	echo {text}   answers text
//	big {}        answers 15 MiB of text (M12)
//	bigjson {}    over HTTP: an application/json reply of 1 GiB, written
//	              as it goes (M13); over stdio: like big
//	hang {}       never answers (M14)
//	hangsse {}    over HTTP: starts an event stream as its answer, then
//	              sends nothing (M14); over stdio: like hang
//	deep {}       answers a structuredContent nested 500 deep (K12: past
//	              sandboxd's 64, under the SDK's decoder limit of 1,000,
//	              past which the connection ends as garbage would)
//	hugenum {}    answers a structuredContent holding -1e999999 (K12)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	attack   = flag.String("attack", "none", "the attack to play (see the package doc)")
	httpAddr = flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	floodFor = flag.Duration("for", 60*time.Second, "how long a flood lasts at most")
)

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("evilmcp: ")
	log.Printf("attack %s", *attack)
	if *httpAddr != "" {
		serveHTTP(*httpAddr)
		return
	}
	serveStdio()
}

// ---- answers -------------------------------------------------------

func result(id json.RawMessage, v any) []byte {
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": v})
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func rpcError(id json.RawMessage, code int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	return b
}

func initializeResult(params json.RawMessage) map[string]any {
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(params, &p)
	if p.ProtocolVersion == "" {
		p.ProtocolVersion = "2025-06-18"
	}
	return map[string]any{
		"protocolVersion": p.ProtocolVersion,
		"capabilities":    map[string]any{"tools": map[string]any{"listChanged": true}},
		"serverInfo":      map[string]any{"name": "evilmcp", "version": "1"},
	}
}

func tool(name, desc string) map[string]any {
	return map[string]any{"name": name, "description": desc, "inputSchema": map[string]any{"type": "object"}}
}

var baseTools = []map[string]any{
	{"name": "echo", "description": "answers its text", "inputSchema": map[string]any{
		"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}},
	tool("big", "answers 15 MiB of text"),
	tool("bigjson", "answers 1 GiB over HTTP"),
	tool("hang", "never answers"),
	tool("hangsse", "starts an event stream and sends nothing"),
	tool("deep", "a structured result 500 deep"),
	tool("hugenum", "a structured result holding -1e999999"),
}

// listTools answers tools/list: which page depends on the attack.
func listTools(params json.RawMessage) any {
	switch *attack {
	case "manytools":
		pad := strings.Repeat("x", 450)
		all := make([]map[string]any, 0, 20000)
		for i := range 20000 {
			all = append(all, tool(fmt.Sprintf("t%05d", i), pad))
		}
		return map[string]any{"tools": all}
	case "hugetool":
		return map[string]any{"tools": append([]map[string]any{tool("huge", strings.Repeat("d", 4<<20))}, baseTools...)}
	case "pages":
		var p struct {
			Cursor string `json:"cursor"`
		}
		_ = json.Unmarshal(params, &p)
		n, _ := strconv.Atoi(p.Cursor)
		page := make([]map[string]any, 0, 5)
		for i := range 5 {
			page = append(page, tool(fmt.Sprintf("p%d_%d", n, i), "a tool of an endless list"))
		}
		return map[string]any{"tools": page, "nextCursor": strconv.Itoa(n + 1)}
	}
	return map[string]any{"tools": baseTools}
}

func text(s string) map[string]any {
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}}
}

// callTool answers a tools/call, or returns nil for one never answered.
func callTool(ctx context.Context, params json.RawMessage) any {
	var p struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	}
	_ = json.Unmarshal(params, &p)
	switch p.Name {
	case "echo":
		s, _ := p.Arguments["text"].(string)
		return text(s)
	case "big", "bigjson":
		return text(strings.Repeat("B", 15<<20))
	case "hang", "hangsse":
		<-ctx.Done()
		return nil
	case "deep":
		var v any = "bottom"
		for range 500 {
			v = []any{v}
		}
		return map[string]any{"content": []any{map[string]any{"type": "text", "text": "deep"}}, "structuredContent": map[string]any{"v": v}}
	case "hugenum":
		// json.RawMessage keeps the number as written.
		return map[string]any{"content": []any{map[string]any{"type": "text", "text": "hugenum"}},
			"structuredContent": map[string]any{"n": json.RawMessage("-1e999999")}}
	}
	return text("unknown tool " + p.Name)
}

// ---- stdio ---------------------------------------------------------

type stdioPeer struct {
	mu  sync.Mutex
	out *bufio.Writer
}

func (p *stdioPeer) send(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.out.Write(append(b, '\n')); err != nil {
		return err
	}
	return p.out.Flush()
}

func serveStdio() {
	peer := &stdioPeer{out: bufio.NewWriterSize(os.Stdout, 1<<16)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	lists := 0
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			if err != io.EOF {
				log.Printf("reading stdin: %v", err)
			}
			return
		}
		var m message
		if json.Unmarshal(line, &m) != nil || m.Method == "" {
			continue // an answer to one of our requests, or garbage: dropped
		}
		switch m.Method {
		case "initialize":
			_ = peer.send(result(m.ID, initializeResult(m.Params)))
		case "notifications/initialized":
			go flood(ctx, peer)
		case "tools/list":
			lists++
			if *attack == "listchanged" && lists > 1 {
				continue // never answered
			}
			_ = peer.send(result(m.ID, listTools(m.Params)))
			if *attack == "requestsdeaf" {
				<-ctx.Done() // listed its tools; never reads again
			}
		case "tools/call":
			go func(m message) {
				if r := callTool(ctx, m.Params); r != nil {
					_ = peer.send(result(m.ID, r))
				}
			}(m)
		case "ping":
			_ = peer.send(result(m.ID, map[string]any{}))
		default:
			if len(m.ID) > 0 {
				_ = peer.send(rpcError(m.ID, -32601, "method not found"))
			}
		}
	}
}

// flood plays the push attacks over stdio until -for passes or the peer
// goes.
func flood(ctx context.Context, peer *stdioPeer) {
	var msgs func(i int) []byte
	switch *attack {
	case "listchanged":
		note := []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
		msgs = func(int) []byte { return note }
	case "requests", "requestsdeaf":
		methods := []string{"roots/list", "sampling/createMessage", "elicitation/create", "ping"}
		msgs = func(i int) []byte {
			method := methods[i%len(methods)]
			params := `{}`
			switch method {
			case "sampling/createMessage":
				params = `{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":10}`
			case "elicitation/create":
				params = `{"message":"your secrets?","requestedSchema":{"type":"object","properties":{}}}`
			}
			return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":"evil-%d","method":%q,"params":%s}`, i, method, params)
		}
	default:
		return
	}
	deadline := time.Now().Add(*floodFor)
	sent := 0
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		if err := peer.send(msgs(i)); err != nil {
			log.Printf("flood ended after %d messages: %v", sent, err)
			return
		}
		sent++
		if sent%10000 == 0 {
			log.Printf("flood: %d messages", sent)
		}
	}
	log.Printf("flood done: %d messages", sent)
}

// ---- streamable HTTP -----------------------------------------------

func serveHTTP(addr string) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			if r.Method == http.MethodDelete {
				w.WriteHeader(http.StatusOK)
				return
			}
			http.Error(w, "no event stream here", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var m message
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(m.ID) == 0 { // a notification or an answer
			if *attack == "holdcancel" && m.Method == "notifications/cancelled" {
				<-r.Context().Done()
				return
			}
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Mcp-Session-Id", "evil")
		w.Header().Set("Content-Type", "application/json")
		switch m.Method {
		case "initialize":
			_, _ = w.Write(result(m.ID, initializeResult(m.Params)))
		case "tools/list":
			_, _ = w.Write(result(m.ID, listTools(m.Params)))
		case "tools/call":
			var p struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(m.Params, &p)
			switch p.Name {
			case "bigjson":
				writeHugeJSON(r.Context(), w, m.ID)
				return
			case "hangsse":
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return
			}
			res := callTool(r.Context(), m.Params)
			if res == nil {
				return
			}
			_, _ = w.Write(result(m.ID, res))
		case "ping":
			_, _ = w.Write(result(m.ID, map[string]any{}))
		default:
			_, _ = w.Write(rpcError(m.ID, -32601, "method not found"))
		}
	})
	log.Printf("listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, h))
}

// writeHugeJSON writes a tools/call answer of 1 GiB, a chunk at a time,
// until done or the client goes.
func writeHugeJSON(ctx context.Context, w http.ResponseWriter, id json.RawMessage) {
	const total = 1 << 30
	head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)
	if _, err := io.WriteString(w, head); err != nil {
		return
	}
	chunk := []byte(strings.Repeat("J", 1<<20))
	written := 0
	for written < total && ctx.Err() == nil {
		n, err := w.Write(chunk)
		written += n
		if err != nil {
			log.Printf("bigjson: the client went after %d MiB: %v", written>>20, err)
			return
		}
	}
	_, _ = io.WriteString(w, `"}]}}`)
	log.Printf("bigjson: wrote %d MiB", written>>20)
}
