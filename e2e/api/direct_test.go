package api

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// The in-process servers of this suite are assembled as `sandboxd serve`
// is (package daemon), so their calls take serve's way to the agent: the
// direct path, not the engine's attach stream (decision 0035).
func TestInProcessServerCallsOverTheDirectPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startServer(t)
	c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := sess.Call(ctx, "terminal", map[string]any{"command": "echo direct"}, nil)
	if err != nil || obs.IsError {
		t.Fatalf("terminal: %v %+v", err, obs)
	}
	m, err := s.manager.Get(sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Direct() {
		t.Errorf("session %s took the engine's attach stream, not the direct path serve takes", sess.ID)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
