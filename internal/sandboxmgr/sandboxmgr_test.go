package sandboxmgr

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/core"
	"github.com/sandboxd/sandboxd/sandbox"
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

// Invalid options name the API's fields (memory_mb, tmp_mb), not the
// manager's, and stay invalid-params errors.
func TestInvalidOptionsUseAPINames(t *testing.T) {
	for _, c := range []struct {
		o    core.CreateOptions
		want string
	}{
		{core.CreateOptions{Image: "img", MemoryBytes: 1 << 20}, "limits.memory_mb: 1 MiB is below the minimum of 64 MiB"},
		{core.CreateOptions{Image: "img", MemoryBytes: 128 << 20, TmpBytes: 100 << 20}, "/tmp (limits.tmp_mb 100 MiB) = 100 MiB of tmpfs, more than the 80 MiB that limits.memory_mb 128 MiB leaves"},
	} {
		_, err := Options(c.o).Resolve(sandbox.SessionOptions{})
		if err == nil {
			t.Fatalf("%+v accepted", c.o)
		}
		got := apiNames(fmt.Errorf("session x: %w", err))
		msg := got.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%q lacks %q", msg, c.want)
		}
		if strings.Contains(msg, "limits.memory ") || strings.Contains(msg, "limits.memory:") || strings.Contains(msg, "limits.tmpfs") {
			t.Errorf("manager's names in %q", msg)
		}
		if apierr.KindOf(got) != apierr.InvalidParams {
			t.Errorf("kind %v", apierr.KindOf(got))
		}
	}
}
