package sandboxmgr

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/core"
	"github.com/sandboxd/sandboxd/sandbox"
)

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
