package tools

import (
	"encoding/json"
	"strings"
	"testing"
)

func nested(depth int) any {
	var v any = "bottom"
	for range depth {
		v = []any{v}
	}
	return v
}

func TestCheckStructured(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string // "" passes
	}{
		{"flat", map[string]any{"a": 1.0, "b": []any{"x", true, nil}}, ""},
		{"at the limit", map[string]any{"v": nested(MaxStructuredDepth - 1)}, ""},
		{"one past the limit", map[string]any{"v": nested(MaxStructuredDepth)}, "deeper than 64"},
		{"9000 deep", map[string]any{"v": nested(9000)}, "deeper than 64"},
		{"huge negative number", map[string]any{"n": json.Number("-1e999999")}, "out of the range"},
		{"huge number in a list", map[string]any{"n": []any{json.Number("1e400")}}, "out of the range"},
		{"big but finite", map[string]any{"n": json.Number("1.7e308")}, ""},
		{"tiny rounds to zero", map[string]any{"n": json.Number("1e-400")}, ""},
		{"integer past int64", map[string]any{"n": json.Number("123456789012345678901234567890")}, ""},
	} {
		err := CheckStructured(tc.v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
