package wsapi

import (
	"encoding/json"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/wsproto"
)

// session.create's shell_init and entrypoint reach the manager's options
// as written (the manager validates them, naming the key).
func TestCreateOptionsImageEnvironment(t *testing.T) {
	var p wsproto.CreateParams
	if err := json.Unmarshal([]byte(`{"shell_init":"image","entrypoint":"image"}`), &p); err != nil {
		t.Fatal(err)
	}
	o, err := createOptions(p)
	if err != nil {
		t.Fatal(err)
	}
	if o.ShellInit != sandbox.ShellInitImage || o.Entrypoint != sandbox.EntrypointImage {
		t.Fatalf("%+v", o)
	}
}
