package sandboxmgr

import (
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/apierr"
	"github.com/sandboxd/sandboxd/server/core"
)

func TestErrorsAreClassified(t *testing.T) {
	for err, want := range map[error]apierr.Kind{
		fmt.Errorf("x: %w", sandbox.ErrNotFound):                                    apierr.NotFound,
		&sandbox.OptionsError{Problems: []string{"image: is empty"}}:                apierr.InvalidParams,
		fmt.Errorf("session s: %w", sandbox.ErrNotReady):                            apierr.Unavailable,
		fmt.Errorf("session s: %w: container died", sandbox.ErrFailed):              apierr.Unavailable,
		fmt.Errorf("calling terminal: %w", agent.ErrBusy):                           apierr.Busy,
		fmt.Errorf("upload: %w", agent.ErrOutsideWorkspace):                         apierr.InvalidParams,
		fmt.Errorf("session s: %w: no such image", sandbox.ErrStart):                apierr.Internal,
		fmt.Errorf("session s: %w: %w", sandbox.ErrStart, sandbox.ErrImageNotFound): apierr.InvalidParams,
		fmt.Errorf("session s: %w", sandbox.ErrManagerClosed):                       apierr.Unavailable,
	} {
		if got := apierr.KindOf(err); got != want {
			t.Errorf("%v: %v, want %v", err, got, want)
		}
	}
}

func TestOptions(t *testing.T) {
	o := Options(core.CreateOptions{Image: "img", MemoryBytes: 1 << 30, CPUs: 0.5, Pids: 100, TmpBytes: 64 << 20, IdleTimeout: -1, Network: "bridge"})
	if o.Image != "img" || o.Limits.Memory != 1<<30 || o.Limits.CPUs != 0.5 || o.Limits.Pids != 100 || o.Limits.Tmpfs != 64<<20 ||
		o.IdleTimeout != sandbox.NoIdleTimeout || o.Network != "bridge" {
		t.Fatalf("%+v", o)
	}
	if Options(core.CreateOptions{IdleTimeout: time.Minute}).IdleTimeout != time.Minute {
		t.Fatal("idle timeout")
	}
}
