package wsapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/wsproto"
)

// The wire's create params become the manager's options: sizes in MiB
// become bytes, a negative idle timeout is "never", zero stays zero (the
// manager's default).
func TestCreateOptions(t *testing.T) {
	o, err := createOptions(wsproto.CreateParams{
		Image: "img", Network: "bridge", IdleTimeout: -1, AllowHosts: []string{"pypi.org", "192.0.2.0/24"}, Runtime: "runsc",
		EditablePaths: []string{"/testbed"}, Cwd: "/testbed", User: "1000:1000",
		Limits: &wsproto.Limits{MemoryMB: 1024, CPUs: 0.5, Pids: 100, TmpMB: 64},
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.Image != "img" || o.Limits.Memory != 1<<30 || o.Limits.CPUs != 0.5 || o.Limits.Pids != 100 || o.Limits.Tmpfs != 64<<20 ||
		o.IdleTimeout != sandbox.NoIdleTimeout || o.Network != "bridge" || len(o.AllowHosts) != 2 || o.AllowHosts[1] != "192.0.2.0/24" || o.Runtime != "runsc" ||
		len(o.EditablePaths) != 1 || o.EditablePaths[0] != "/testbed" || o.Cwd != "/testbed" || o.User != "1000:1000" {
		t.Fatalf("%+v", o)
	}
	if o, _ := createOptions(wsproto.CreateParams{IdleTimeout: wsproto.Duration(time.Minute)}); o.IdleTimeout != time.Minute {
		t.Fatal("idle timeout")
	}
	if o, _ := createOptions(wsproto.CreateParams{}); o.IdleTimeout != 0 || o.Limits != (sandbox.Limits{}) {
		t.Fatalf("zero params: %+v", o)
	}
	if _, err := createOptions(wsproto.CreateParams{Limits: &wsproto.Limits{Pids: -1}}); apierr.KindOf(err) != apierr.InvalidParams {
		t.Fatalf("negative limits: %v", err)
	}
	var p wsproto.CreateParams
	if err := json.Unmarshal([]byte(`{"terminal":{"no_change_timeout":2.5}}`), &p); err != nil {
		t.Fatal(err)
	}
	if o, _ := createOptions(p); o.Terminal.NoChangeTimeout != 2500*time.Millisecond {
		t.Fatalf("terminal.no_change_timeout: %+v", o.Terminal)
	}
	if o, _ := createOptions(wsproto.CreateParams{Terminal: &wsproto.TerminalParams{NoChangeTimeout: wsproto.Duration(time.Minute)}}); o.Terminal.NoChangeTimeout != time.Minute {
		t.Fatalf("terminal.no_change_timeout: %+v", o.Terminal)
	}
}
