package apierr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"testing"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/wsproto"
)

func TestClassification(t *testing.T) {
	tests := []struct {
		err    error
		kind   Kind
		code   int
		status int
		tool   bool // a tool failure (MCP isError) rather than a protocol error
	}{
		{New(NotFound, "no session"), NotFound, wsproto.CodeNotFound, http.StatusNotFound, true},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), Timeout, wsproto.CodeTimeout, http.StatusGatewayTimeout, true},
		{context.Canceled, Cancelled, wsproto.CodeCancelled, 499, true},
		{fmt.Errorf("%w %q", tools.ErrUnknownTool, "x"), InvalidParams, wsproto.CodeInvalidParams, http.StatusBadRequest, false},
		{fmt.Errorf("open: %w", fs.ErrNotExist), NotFound, wsproto.CodeNotFound, http.StatusNotFound, true},
		{errors.New("something odd"), Internal, wsproto.CodeInternal, http.StatusInternalServerError, true},
		{fmt.Errorf("wrapped: %w", New(Busy, "full")), Busy, wsproto.CodeBusy, http.StatusTooManyRequests, true},
	}
	for _, tt := range tests {
		if k := KindOf(tt.err); k != tt.kind {
			t.Errorf("%v: kind %v, want %v", tt.err, k, tt.kind)
		}
		if c := JSONRPC(tt.err).Code; c != tt.code {
			t.Errorf("%v: code %d, want %d", tt.err, c, tt.code)
		}
		if s := HTTPStatus(tt.err); s != tt.status {
			t.Errorf("%v: status %d, want %d", tt.err, s, tt.status)
		}
		if ToolFailure(tt.err) != tt.tool {
			t.Errorf("%v: tool failure %v", tt.err, !tt.tool)
		}
	}
	if From(nil) != nil {
		t.Error("From(nil)")
	}
}
