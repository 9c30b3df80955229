package wsproto

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationRange(t *testing.T) {
	for in, want := range map[string]time.Duration{`90`: 90 * time.Second, `"1m30s"`: 90 * time.Second, `1.5`: 1500 * time.Millisecond, `-1`: -time.Second} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("%s: got %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, in := range []string{`1e30`, `-1e30`, `"forever"`, `true`} {
		var d Duration
		err := json.Unmarshal([]byte(in), &d)
		if err == nil {
			t.Errorf("%s: accepted as %v", in, time.Duration(d))
			continue
		}
		if strings.HasPrefix(in, "1e") && !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%s: %v", in, err)
		}
	}
}
