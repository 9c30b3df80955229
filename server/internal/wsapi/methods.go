package wsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
	"github.com/sandboxd/sandboxd/wsproto"
)

// errResponded: the method has queued its response itself (under a stream
// lock, ahead of replayed output).
var errResponded = errors.New("responded")

type method func(c *conn, req *wsproto.Request) (any, error)

var methods map[string]method

func init() {
	methods = map[string]method{
		wsproto.MethodSessionCreate: sessionCreate,
		wsproto.MethodSessionAttach: sessionAttach,
		wsproto.MethodSessionList:   sessionList,
		wsproto.MethodSessionClose:  sessionClose,
		wsproto.MethodSessionPause:  sessionPause,
		wsproto.MethodSessionResume: sessionResume,
		wsproto.MethodToolsList:     toolsList,
		wsproto.MethodSessionEgress: sessionEgress,
		wsproto.MethodToolsCall:     toolsCall,
		wsproto.MethodToolsCancel:   toolsCancel,
		wsproto.MethodFilesUpload:   filesUpload,
		wsproto.MethodFilesDownload: filesDownload,
		wsproto.MethodStreamRead:    streamRead,
		wsproto.MethodPTYOpen:       ptyOpen,
		wsproto.MethodPTYClose:      ptyClose,
		// Snapshots, forks and restore (snapshot.go).
		wsproto.MethodSessionSnapshot: sessionSnapshot,
		wsproto.MethodSessionFork:     sessionFork,
		wsproto.MethodSessionRestore:  sessionRestore,
		wsproto.MethodSnapshotList:    snapshotList,
		wsproto.MethodSnapshotDelete:  snapshotDelete,
		wsproto.MethodSnapshotWarm:    snapshotWarm,
	}
}

// decode reads params strictly: unknown fields are errors (a typo, or a
// feature this server does not have, must not pass silently).
func decode(req *wsproto.Request, into any) error {
	raw := bytes.TrimSpace(req.Params)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return apierr.New(apierr.InvalidParams, "invalid params for %s: %v", req.Method, err)
	}
	if dec.More() {
		return apierr.New(apierr.InvalidParams, "invalid params for %s: trailing data", req.Method)
	}
	return nil
}

// detached is the context of work that outlives the connection: a retry on
// a new connection joins it.
func (c *conn) detached() context.Context { return context.WithoutCancel(c.ctx) }

func sessionCreate(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.CreateParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	opts, err := createOptions(p)
	if err != nil {
		return nil, err
	}
	r, err := c.h.core.Create(c.ctx, c.p, core.APIWebSocket, core.CreateRequest{Profile: p.Profile, Options: opts, IdempotencyKey: p.IdempotencyKey})
	if err != nil {
		return nil, err
	}
	defs, err := r.Session.Tools(c.ctx)
	if err != nil {
		// Nobody would learn the id or token of this session: end it.
		_ = r.Session.Close(c.detached())
		return nil, fmt.Errorf("the session started but listing its tools failed: %w", err)
	}
	c.grant(r.Session)
	c.attach(r.Session, 0, func(info core.ReplayInfo) {
		c.replyLocked(req.ID, &wsproto.CreateResult{
			SessionID: r.Session.ID(), SessionToken: r.Token, State: r.Session.Info().State,
			Tools: defs, NextSeq: info.NextSeq,
		})
	})
	if c.ctx.Err() != nil {
		// The client left as the answer was made: it never reads it.
		c.h.core.AbandonCreate(c.p, r.Session, p.IdempotencyKey)
	}
	return nil, errResponded
}

// createOptions checks the wire options and translates them into the
// manager's (sizes in MiB become bytes, a negative idle timeout "never").
// Zero fields stay zero: the profile's, then the manager's defaults fill
// them.
func createOptions(p wsproto.CreateParams) (sandbox.SessionOptions, error) {
	o := sandbox.SessionOptions{
		Image: p.Image, Env: p.Env, Cwd: p.Cwd, User: p.User, EditablePaths: p.EditablePaths, Network: p.Network,
		AllowHosts: p.AllowHosts, Runtime: p.Runtime, IdleTimeout: time.Duration(p.IdleTimeout), Labels: p.Labels,
		Skills: p.Skills, SkillsInstall: p.SkillsInstall, ShellInit: p.ShellInit, Entrypoint: p.Entrypoint, ToolSet: p.ToolSet,
	}
	for i, m := range p.MCPServers {
		srv := sandbox.MCPServer{
			Name: m.Name, Image: m.Image, Command: m.Command, Args: m.Args, Env: m.Env,
			Transport: m.Transport, Port: m.Port, Path: m.Path, Start: m.Start, Workspace: m.Workspace,
		}
		if l := m.Limits; l != nil {
			if l.MemoryMB < 0 || l.CPUs < 0 || l.Pids < 0 || l.TmpMB != 0 {
				return o, apierr.New(apierr.InvalidParams, "mcp_servers[%d].limits: memory_mb, cpus and pids must not be negative, and a sidecar has no tmp_mb", i)
			}
			srv.Limits = sandbox.SidecarLimits{Memory: int64(l.MemoryMB) << 20, CPUs: l.CPUs, Pids: int64(l.Pids)}
		}
		o.MCPServers = append(o.MCPServers, srv)
	}
	if p.IdleTimeout < 0 {
		o.IdleTimeout = sandbox.NoIdleTimeout
	}
	if p.Terminal != nil {
		o.Terminal.NoChangeTimeout = time.Duration(p.Terminal.NoChangeTimeout)
	}
	if l := p.Limits; l != nil {
		if l.MemoryMB < 0 || l.CPUs < 0 || l.Pids < 0 || l.TmpMB < 0 {
			return o, apierr.New(apierr.InvalidParams, "limits must not be negative")
		}
		o.Limits = sandbox.Limits{
			Memory: int64(l.MemoryMB) << 20,
			CPUs:   l.CPUs,
			Pids:   int64(l.Pids),
			Tmpfs:  int64(l.TmpMB) << 20,
		}
	}
	return o, nil
}

func sessionAttach(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.AttachParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	s, err := c.session(wsproto.SessionRef{SessionID: p.SessionID, SessionToken: p.SessionToken})
	if err != nil {
		return nil, err
	}
	defs, err := s.Tools(c.ctx)
	if err != nil {
		return nil, err
	}
	c.attach(s, p.LastSeq, func(info core.ReplayInfo) {
		c.replyLocked(req.ID, &wsproto.AttachResult{
			SessionID: s.ID(), State: s.Info().State, Tools: defs,
			Replayed: info.Replayed, NextSeq: info.NextSeq, Missed: info.Missed,
		})
	})
	return nil, errResponded
}

func sessionList(c *conn, req *wsproto.Request) (any, error) {
	var p struct{}
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	res := &wsproto.ListResult{Sessions: []wsproto.SessionInfo{}}
	for _, s := range c.h.core.List(c.p) {
		info := s.Info()
		res.Sessions = append(res.Sessions, wsproto.SessionInfo{
			SessionID: s.ID(), State: info.State, Image: info.Image, API: s.API(), Labels: info.Labels,
		})
	}
	return res, nil
}

// sessionEgress lists a session's recent egress denials.
func sessionEgress(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.SessionRef
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	s, err := c.session(p)
	if err != nil {
		return nil, err
	}
	res := &wsproto.EgressResult{Denials: []wsproto.EgressDenial{}}
	for _, d := range s.EgressDenials() {
		res.Denials = append(res.Denials, wsproto.EgressDenial{Time: d.Time, Host: d.Host, Port: d.Port, Via: d.Via, Reason: d.Reason, Count: d.Count})
	}
	return res, nil
}

func sessionClose(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.SessionRef
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	s, err := c.session(p)
	if err != nil {
		c.mu.Lock()
		_, granted := c.grants[p.SessionID]
		c.mu.Unlock()
		if apierr.KindOf(err) == apierr.NotFound && c.h.core.Ended(c.p, p.SessionID, p.SessionToken, granted) {
			return &wsproto.CloseResult{Closed: true}, nil // closed before: idempotent
		}
		return nil, err
	}
	if err := s.Close(c.detached()); err != nil {
		return nil, err
	}
	return &wsproto.CloseResult{Closed: true}, nil
}

func sessionPause(c *conn, req *wsproto.Request) (any, error)  { return setPaused(c, req, true) }
func sessionResume(c *conn, req *wsproto.Request) (any, error) { return setPaused(c, req, false) }

// setPaused is session.pause (pause) and session.resume (!pause).
func setPaused(c *conn, req *wsproto.Request, pause bool) (any, error) {
	var p wsproto.SessionRef
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	s, err := c.session(p)
	if err != nil {
		return nil, err
	}
	if pause {
		err = s.Pause(c.detached())
	} else {
		err = s.Resume(c.detached())
	}
	if err != nil {
		return nil, err
	}
	return &wsproto.PauseResult{Paused: pause}, nil
}

func toolsList(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.ToolsListParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	defs, err := s.Tools(c.ctx)
	if err != nil {
		return nil, err
	}
	return toolsIn(p.Format, defs)
}

// toolsIn exports definitions in a format: sandboxd's own, MCP or OpenAI.
func toolsIn(format string, defs []tools.Definition) (*wsproto.ToolsListResult, error) {
	out := make([]any, len(defs))
	for i, d := range defs {
		switch format {
		case "", "sandboxd":
			out[i] = d
		case "mcp":
			out[i] = mcpexport.Tool(d)
		case "openai":
			out[i] = d.OpenAI()
		default:
			return nil, apierr.New(apierr.InvalidParams, "format %q: want \"\", \"mcp\" or \"openai\"", format)
		}
	}
	return &wsproto.ToolsListResult{Tools: out}, nil
}

func toolsCall(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.CallParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, apierr.New(apierr.InvalidParams, "name (the tool) is required")
	}
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	// The call runs detached from this connection; a retry with the same
	// id (after a reconnect) joins it or gets its stored result.
	return s.Idempotent(c.ctx, req.ID, req.Method, retryForm(&p, &p.SessionRef), func() (json.RawMessage, error) {
		r := core.CallRequest{Transport: metrics.TransportWS, CallID: req.ID, Name: p.Name, Args: p.Arguments, Stream: p.Stream}
		if p.Stream {
			// Paced to this connection (decision 0038): its output waits
			// for the queue to drain, and is never withheld from it.
			r.Pace = c.pace
			defer c.trackPaced(s.ID(), req.ID)()
		}
		obs, err := s.Call(c.detached(), r)
		if err != nil {
			return nil, err
		}
		return json.Marshal(obs)
	})
}

func toolsCancel(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.CancelParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	if len(p.CallID) == 0 {
		return nil, apierr.New(apierr.InvalidParams, "call_id is required")
	}
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	return &wsproto.CancelResult{Cancelled: s.Cancel(p.CallID)}, nil
}

func filesUpload(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.UploadParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	if p.UploadID == "" && p.Path == "" {
		return nil, apierr.New(apierr.InvalidParams, "path (the directory to unpack into) is required")
	}
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	final := p.Final == nil || *p.Final
	return s.Idempotent(c.ctx, req.ID, req.Method, retryForm(&p, &p.SessionRef), func() (json.RawMessage, error) {
		up, err := s.UploadChunk(c.detached(), core.UploadRequest{Dir: p.Path, UploadID: p.UploadID, Offset: p.Offset, Data: p.Data, Final: final})
		if err != nil {
			return nil, err
		}
		r := &wsproto.UploadResult{Bytes: up.Bytes, Done: final}
		if !final || p.UploadID != "" {
			r.UploadID = up.UploadID
		}
		return json.Marshal(r)
	})
}

func filesDownload(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.DownloadParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	if p.DownloadID == "" && p.Path == "" {
		return nil, apierr.New(apierr.InvalidParams, "path is required")
	}
	// A chunk and its envelope must fit the client's messages too.
	if p.ChunkSize <= 0 {
		p.ChunkSize = core.DefaultDownloadChunk
	}
	p.ChunkSize = max(1, min(p.ChunkSize, int(c.h.opts.MaxMessageBytes/4*3)-4096))
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	d, err := s.DownloadChunk(c.ctx, core.DownloadRequest{Path: p.Path, DownloadID: p.DownloadID, Offset: p.Offset, Size: p.ChunkSize})
	if err != nil {
		return nil, err
	}
	r := &wsproto.DownloadResult{Offset: d.Offset, Data: d.Data, EOF: d.EOF}
	if d.Data == nil {
		r.Data = []byte{}
	}
	if !d.EOF || p.DownloadID != "" {
		r.DownloadID = d.DownloadID
	}
	return r, nil
}

// streamRead reads a range of the session's output back from its ring: a
// client refilling a stream.gap.
func streamRead(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.StreamReadParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	if p.FromSeq < 1 || p.ToSeq < p.FromSeq {
		return nil, apierr.New(apierr.InvalidParams, "from_seq must be at least 1 and to_seq at least from_seq (got %d..%d)", p.FromSeq, p.ToSeq)
	}
	if p.MaxBytes < 0 {
		return nil, apierr.New(apierr.InvalidParams, "max_bytes must not be negative")
	}
	if p.MaxBytes == 0 || p.MaxBytes > wsproto.MaxStreamRead {
		p.MaxBytes = wsproto.MaxStreamRead
	}
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	r := s.ReadOutput(p.FromSeq, p.ToSeq, p.MaxBytes)
	res := &wsproto.StreamReadResult{Chunks: make([]wsproto.StreamOutput, len(r.Chunks)), LostToSeq: r.LostTo, NextSeq: r.NextSeq}
	for i, ch := range r.Chunks {
		res.Chunks[i] = wsproto.StreamOutput{SessionID: s.ID(), CallID: ch.CallID, Seq: ch.Seq, Data: ch.Data}
	}
	return res, nil
}

// retryForm is what a retried request must repeat to be the same request:
// its decoded params in one form (so whitespace and the order of the
// request's fields do not matter) without the session token (a retry may
// carry it or not; it says who asks, not what). The tool's arguments are
// compared as sent, less whitespace.
func retryForm(params any, ref *wsproto.SessionRef) []byte {
	token := ref.SessionToken
	ref.SessionToken = ""
	b, err := json.Marshal(params)
	ref.SessionToken = token
	if err != nil {
		return nil // cannot happen: params were decoded from JSON
	}
	return b
}
