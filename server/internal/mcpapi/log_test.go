package mcpapi

import (
	"log/slog"
	"strings"
	"testing"
)

func TestMinLevelKeepsWarnings(t *testing.T) {
	var b strings.Builder
	log := slog.New(minLevel{slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelWarn}).With("component", "mcpapi")
	log.Info("server session connected")
	log.Warn("kept")
	if got := b.String(); strings.Contains(got, "connected") || !strings.Contains(got, "msg=kept component=mcpapi") {
		t.Fatalf("log: %q", got)
	}
}
