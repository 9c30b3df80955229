package testenv

import (
	"strings"
	"testing"
)

func TestGoroutinesFilters(t *testing.T) {
	all := Goroutines()
	if !strings.Contains(all, "TestGoroutinesFilters") {
		t.Fatalf("own stack missing: %s", all)
	}
	if got := Goroutines("no-such-frame-anywhere"); got != "" {
		t.Fatalf("filter kept %q", got)
	}
	if got := Goroutines("testenv.TestGoroutinesFilters"); !strings.Contains(got, "goroutine ") {
		t.Fatalf("filter lost own: %q", got)
	}
}
