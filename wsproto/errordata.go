package wsproto

import (
	"encoding/json"
	"time"
)

// ErrorData is the data of every error the server sends: the error's kind
// ("busy", "not_found", ...), and for a create that could not start soon
// enough (CodeBusy) the seconds after which its retry is likely to get a
// sandbox. A create's retry gets the sandbox the busy one started, when
// it is of the same profile and options (docs/websocket-protocol.md).
type ErrorData struct {
	Kind       string `json:"kind"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

// RetryAfter is the retry_after of a busy error: ok is false for any other
// error, and for a busy one without it (the server at --max-sessions: retry
// with a backoff of your own).
func (e *Error) RetryAfter() (d time.Duration, ok bool) {
	if e == nil || e.Code != CodeBusy {
		return 0, false
	}
	var data ErrorData
	switch v := e.Data.(type) {
	case ErrorData:
		data = v
	case *ErrorData:
		data = *v
	default: // decoded from the wire: a map
		b, err := json.Marshal(v)
		if err != nil || json.Unmarshal(b, &data) != nil {
			return 0, false
		}
	}
	if data.RetryAfter <= 0 {
		return 0, false
	}
	return time.Duration(data.RetryAfter) * time.Second, true
}
