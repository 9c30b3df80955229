package bash

import (
	"context"
	"testing"
)

// BenchmarkEcho measures one `echo` round trip: command file written, line
// typed, prompt marker read back, result built.
func BenchmarkEcho(b *testing.B) {
	for _, shell := range shells {
		b.Run(shellName(shell), func(b *testing.B) {
			e := newExec(b, testOptions(b, shell))
			ctx := context.Background()
			a := Action{Command: "echo hi"}
			b.ReportAllocs()
			for b.Loop() {
				obs, err := e.Call(ctx, a)
				if err != nil || obs.IsError || obs.Structured.(Output).ExitCode != 0 {
					b.Fatalf("echo failed: %v %v", err, obs)
				}
			}
		})
	}
}
