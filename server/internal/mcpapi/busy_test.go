package mcpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// A sandbox that could not start soon enough is a failed tool result that
// says when to retry, in its text and in _meta (decision 0041); other
// failures carry no _meta.
func TestFailureOfABusyCreate(t *testing.T) {
	busy := fmt.Errorf("creating the sandbox of this MCP session: %w (the next call tries again)",
		fmt.Errorf("session x: %w", &sandbox.BusyError{RetryAfter: 7 * time.Second, Reason: "all 4 start slots stayed taken for 2m0s"}))
	res := failure(busy)
	text := res.Content[0]
	b, _ := json.Marshal(res)
	if !res.IsError || !strings.Contains(fmt.Sprint(text), "retry after 7 s") ||
		!strings.Contains(string(b), `"_meta":{"sandboxd/error":{"code":-32029,"kind":"busy","retry_after":7}}`) {
		t.Fatalf("busy failure: %s", b)
	}
	if res := failure(fmt.Errorf("session x: %w", sandbox.ErrClosed)); res.Meta != nil {
		t.Fatalf("a closed session's failure has _meta: %v", res.Meta)
	}
}
