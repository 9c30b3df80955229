package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
)

// ErrUnknownTool is returned (wrapped) for a call to a tool the set lacks.
var ErrUnknownTool = errors.New("unknown tool")

// ErrClosed is returned for a call on a closed Toolset.
var ErrClosed = errors.New("toolset is closed")

// Env is what factories know of the place their tools run in.
type Env struct {
	// Workspace is the default directory of the session (/workspace in a
	// sandbox): grep and glob search it when no path is given, the terminal
	// starts in it unless Dir is set.
	Workspace string
	// Dir is the session's working directory, where the terminal starts
	// (its "dir" param aside): the image's WORKDIR or the session's cwd in
	// a sandbox. Empty: Workspace.
	Dir string
	// StateDir holds files the tools keep for the model, e.g. the full output
	// of a truncated terminal command. Factories create it when needed.
	StateDir string
}

// Spec asks for a tool by factory name, with factory-specific parameters.
type Spec struct {
	Name   string          `json:"name"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Factory makes the tools of one spec. It may return several tools that
// share one executor (the closer of each Tool); the Toolset closes it once.
type Factory func(env Env, params json.RawMessage) ([]*Tool, error)

// Registry maps factory names to factories. The zero value is ready to use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// Register adds a factory; registering a name twice is an error.
func (r *Registry) Register(name string, f Factory) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.factories == nil {
		r.factories = map[string]Factory{}
	}
	if _, dup := r.factories[name]; dup {
		return fmt.Errorf("tools: factory %q registered twice", name)
	}
	r.factories[name] = f
	return nil
}

// Names lists the registered factory names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Resolve builds a Toolset from specs. On any failure the tools made so far
// are closed and nothing leaks.
func (r *Registry) Resolve(env Env, specs []Spec) (*Toolset, error) {
	ts := &Toolset{byName: map[string]*Tool{}}
	for _, spec := range specs {
		r.mu.RLock()
		f, ok := r.factories[spec.Name]
		r.mu.RUnlock()
		if !ok {
			_ = ts.Close() // the error that stopped the build is the one to report
			return nil, fmt.Errorf("tools: no factory %q (have %v): %w", spec.Name, r.Names(), ErrUnknownTool)
		}
		made, err := f(env, spec.Params)
		if err != nil {
			_ = ts.Close() // the error that stopped the build is the one to report
			return nil, fmt.Errorf("tools: factory %q: %w", spec.Name, err)
		}
		for _, t := range made {
			if err := ts.add(t); err != nil {
				ts.closers = appendCloser(ts.closers, t.closer)
				_ = ts.Close() // the error that stopped the build is the one to report
				return nil, err
			}
		}
	}
	return ts, nil
}

// Toolset is the resolved tools of one session.
type Toolset struct {
	mu      sync.RWMutex
	tools   []*Tool
	byName  map[string]*Tool
	closers []io.Closer
	closed  bool
}

// NewToolset builds a Toolset from tools directly (tests, skills).
func NewToolset(tools ...*Tool) (*Toolset, error) {
	ts := &Toolset{byName: map[string]*Tool{}}
	for _, t := range tools {
		if err := ts.add(t); err != nil {
			_ = ts.Close() // the error that stopped the build is the one to report
			return nil, err
		}
	}
	return ts, nil
}

func (ts *Toolset) add(t *Tool) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, dup := ts.byName[t.Name()]; dup {
		return fmt.Errorf("tools: two tools named %q", t.Name())
	}
	ts.tools = append(ts.tools, t)
	ts.byName[t.Name()] = t
	ts.closers = appendCloser(ts.closers, t.closer)
	return nil
}

// Add adds tools to an open set (e.g. skills or sidecar tools joining later).
func (ts *Toolset) Add(tools ...*Tool) error {
	for _, t := range tools {
		if err := ts.add(t); err != nil {
			return err
		}
	}
	return nil
}

func appendCloser(cs []io.Closer, c io.Closer) []io.Closer {
	if c == nil || slices.Contains(cs, c) {
		return cs
	}
	return append(cs, c)
}

// Executors returns the executors of the set's tools (the closer each
// tool was built with, each once), so that a server can reach what an
// executor offers beyond tool calls, such as the skills' InstallAll.
func (ts *Toolset) Executors() []io.Closer {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	return slices.Clone(ts.closers)
}

// Definitions returns the definitions of all tools, in resolution order.
func (ts *Toolset) Definitions() []Definition {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	defs := make([]Definition, len(ts.tools))
	for i, t := range ts.tools {
		defs[i] = t.Definition()
	}
	return defs
}

// Lookup returns the named tool.
func (ts *Toolset) Lookup(name string) (*Tool, bool) {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	t, ok := ts.byName[name]
	return t, ok
}

// Call runs the named tool.
func (ts *Toolset) Call(ctx context.Context, name string, args json.RawMessage) (*Observation, error) {
	ts.mu.RLock()
	closed := ts.closed
	t, ok := ts.byName[name]
	ts.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if !ok {
		return nil, fmt.Errorf("%w %q; available tools: %v", ErrUnknownTool, name, ts.names())
	}
	return t.Call(ctx, args)
}

// Watch follows the output of the named tool's executor (see Watcher).
func (ts *Toolset) Watch(name string, fn StreamFunc) (stop func(), err error) {
	ts.mu.RLock()
	closed := ts.closed
	t, ok := ts.byName[name]
	ts.mu.RUnlock()
	switch {
	case closed:
		return nil, ErrClosed
	case !ok:
		return nil, fmt.Errorf("%w %q; available tools: %v", ErrUnknownTool, name, ts.names())
	}
	w, ok := t.closer.(Watcher)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotWatchable, name)
	}
	return w.Watch(fn), nil
}

func (ts *Toolset) names() []string {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	n := make([]string, len(ts.tools))
	for i, t := range ts.tools {
		n[i] = t.Name()
	}
	return n
}

// Close closes every executor once. It is idempotent.
func (ts *Toolset) Close() error {
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return nil
	}
	ts.closed = true
	closers := ts.closers
	ts.mu.Unlock()
	var errs []error
	for _, c := range closers {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DecodeParams decodes a spec's factory parameters into p strictly: empty
// or null params leave p as it is, unknown fields and trailing data are
// errors (a typo in a session's tool options must not pass silently).
func DecodeParams(params json.RawMessage, p any) error {
	raw := bytes.TrimSpace(params)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the parameters object")
	}
	return nil
}
