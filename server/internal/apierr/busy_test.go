package apierr

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/wsproto"
)

// A busy create is CodeBusy with retry_after in its data, on every
// transport, never a timeout; the Go client's side reads it back.
func TestBusyCreate(t *testing.T) {
	err := fmt.Errorf("session x: %w", &sandbox.BusyError{RetryAfter: 5 * time.Second, Reason: "all 4 start slots stayed taken for 2m0s"})
	for _, err := range []error{err, FromSandbox(err), fmt.Errorf("creating the sandbox of this MCP session: %w", FromSandbox(err))} {
		if k := KindOf(err); k != Busy {
			t.Fatalf("%v: kind %v", err, k)
		}
		if s := HTTPStatus(err); s != http.StatusTooManyRequests {
			t.Fatalf("status %d", s)
		}
		e := JSONRPC(err)
		if e.Code != wsproto.CodeBusy {
			t.Fatalf("code %d", e.Code)
		}
		wire, _ := json.Marshal(e)
		var back wsproto.Error
		if err := json.Unmarshal(wire, &back); err != nil {
			t.Fatal(err)
		}
		if d, ok := back.RetryAfter(); !ok || d != 5*time.Second {
			t.Fatalf("retry after %v %v from %s", d, ok, wire)
		}
		if d := Data(err); d.Kind != "busy" || d.RetryAfter != 5 {
			t.Fatalf("data %+v", d)
		}
	}
	// Other errors carry no retry_after.
	if d := Data(New(Busy, "the server runs its maximum of 3 sessions")); d.RetryAfter != 0 || d.Kind != "busy" {
		t.Fatalf("data %+v", d)
	}
	if _, ok := JSONRPC(context.DeadlineExceeded).RetryAfter(); ok {
		t.Fatal("a timeout has no retry_after")
	}
}
