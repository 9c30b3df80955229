package apierr

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/wsproto"
)

func TestSandboxErrorsAreClassified(t *testing.T) {
	for err, want := range map[error]Kind{
		fmt.Errorf("x: %w", sandbox.ErrNotFound):                                                                                    NotFound,
		&sandbox.OptionsError{Problems: []string{"image: is empty"}}:                                                                InvalidParams,
		fmt.Errorf("session s: %w", sandbox.ErrNotReady):                                                                            Unavailable,
		fmt.Errorf("session s: %w: container died", sandbox.ErrFailed):                                                              Unavailable,
		fmt.Errorf("calling terminal: %w", proto.ErrBusy):                                                                           Busy,
		fmt.Errorf("upload: %w", proto.ErrOutsideWorkspace):                                                                         InvalidParams,
		fmt.Errorf("session s: %w: no such image", sandbox.ErrStart):                                                                Internal,
		fmt.Errorf("session s: %w: %w", sandbox.ErrStart, sandbox.ErrImageNotFound):                                                 InvalidParams,
		fmt.Errorf("session s: %w", sandbox.ErrManagerClosed):                                                                       Unavailable,
		fmt.Errorf("session s: %w: %w", sandbox.ErrStart, &sandbox.UnsupportedError{Runtime: "kubernetes", Feature: "mcp_servers"}): InvalidParams,
		fmt.Errorf("session s: claiming: %w", sandbox.ErrClaimed):                                                                   Conflict,
		fmt.Errorf("session s: %w: %w", sandbox.ErrClosed, context.Canceled):                                                        Cancelled, // the generic rows come first
	} {
		mapped := FromSandbox(err)
		if got := KindOf(mapped); got != want {
			t.Errorf("%v: %v, want %v", err, got, want)
		}
		var oe *sandbox.OptionsError
		if !errors.As(err, &oe) && mapped.Error() != err.Error() {
			t.Errorf("%q became %q", err, mapped)
		}
		// A layer above that wraps it keeps its words and the kind.
		wrapped := fmt.Errorf("listing tools: %w", mapped)
		if got := KindOf(wrapped); got != want {
			t.Errorf("wrapped %v: %v, want %v", err, got, want)
		}
		if !strings.HasPrefix(JSONRPC(wrapped).Message, "listing tools: ") {
			t.Errorf("wrapped %v: %q", err, JSONRPC(wrapped).Message)
		}
	}
	if FromSandbox(nil) != nil {
		t.Error("FromSandbox(nil)")
	}
}

// Error texts carry the agent's words, not the host's protocol internals
// ("agent tools/call: ", agentclient.MethodError), and keep what wraps them.
func TestAgentMethodPrefixRemoved(t *testing.T) {
	for err, want := range map[error]string{
		&agentclient.MethodError{Method: proto.MethodToolsCall, Err: &proto.Error{Code: proto.CodeInvalidParams, Message: `unknown tool "nope"`}}:      `unknown tool "nope"`,
		fmt.Errorf("session s: calling x: %w", &agentclient.MethodError{Method: proto.MethodToolsCall, Err: &proto.Error{Message: "tool x panicked"}}): "tool x panicked",
		&agentclient.MethodError{Method: proto.MethodToolsCall, Name: "grep", Err: fmt.Errorf("decoding the observation: %w", errors.New("bad"))}:      "decoding the observation: bad",
		fmt.Errorf("session s: %w", &agentclient.MethodError{Method: proto.MethodUploadBegin, Err: proto.ErrOutsideWorkspace}):                         "session s: " + proto.ErrOutsideWorkspace.Error(),
		errors.New("the agent failed: kept as it is"): "the agent failed: kept as it is",
	} {
		if got := FromSandbox(err).Error(); got != want {
			t.Errorf("%q became %q, want %q", err, got, want)
		}
		if got := JSONRPC(FromSandbox(err)).Message; strings.Contains(got, "agent tools/call") || strings.Contains(got, "agent fs/") {
			t.Errorf("JSON-RPC message %q", got)
		}
	}
}

// Invalid options name the API's fields (memory_mb, tmp_mb), not the
// manager's, and stay invalid-params errors.
func TestInvalidOptionsUseAPINames(t *testing.T) {
	for _, c := range []struct {
		o    sandbox.SessionOptions
		want string
	}{
		{sandbox.SessionOptions{Image: "img", Limits: sandbox.Limits{Memory: 1 << 20}}, "limits.memory_mb: 1 MiB is below the minimum of 64 MiB"},
		{sandbox.SessionOptions{Image: "img", Limits: sandbox.Limits{Memory: 128 << 20, Tmpfs: 100 << 20}}, "/tmp (limits.tmp_mb 100 MiB) = 100 MiB of tmpfs, more than the 80 MiB that limits.memory_mb 128 MiB leaves"},
	} {
		_, err := c.o.Resolve(sandbox.SessionOptions{})
		if err == nil {
			t.Fatalf("%+v accepted", c.o)
		}
		got := FromSandbox(fmt.Errorf("session x: %w", err))
		msg := got.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%q lacks %q", msg, c.want)
		}
		if strings.Contains(msg, "limits.memory ") || strings.Contains(msg, "limits.memory:") || strings.Contains(msg, "limits.tmpfs") {
			t.Errorf("manager's names in %q", msg)
		}
		if strings.Contains(msg, "session x") {
			t.Errorf("the manager's wrapping in %q", msg)
		}
		if KindOf(got) != InvalidParams {
			t.Errorf("kind %v", KindOf(got))
		}
	}
}

// The names the API gives options are the wire's (wsproto.Limits).
func TestWireNamesAreTheWires(t *testing.T) {
	tags := map[string]bool{}
	lt := reflect.TypeFor[wsproto.Limits]()
	for i := range lt.NumField() {
		name, _, _ := strings.Cut(lt.Field(i).Tag.Get("json"), ",")
		tags["limits."+name] = true
	}
	for f, n := range wireNames {
		if !tags[n] {
			t.Errorf("%s is named %s, not a field of wsproto.Limits", f, n)
		}
	}
}
