package skill

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sandboxd/sandboxd/skills"
)

// BenchmarkSkillCallEcho measures one call of a skill whose script is
// `echo hi` (bash): argv built, bash started in its own session, output
// read to the end, the group killed, the result built. Compare with
// tools/bash's BenchmarkEcho (the terminal's echo, no process start).
func BenchmarkSkillCallEcho(b *testing.B) {
	t := &testing.T{}
	f := &fixture{t: t, root: b.TempDir(), workspace: b.TempDir(), state: b.TempDir(), home: b.TempDir()}
	f.environ = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + f.home}
	s := f.skill(&skills.Skill{Path: "echo", Exec: execOf()}, map[string]string{"scripts/run.sh": "echo hi\n"})
	x, err := New(Options{Dir: f.root, Skills: []*skills.Skill{s}, Workspace: f.workspace, StateDir: f.state, Environ: f.environ})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	ts, _ := x.Tools()
	tool := ts[1]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		obs, err := tool.Call(ctx, json.RawMessage(`{}`))
		if err != nil || obs.IsError {
			b.Fatalf("echo failed: %v %v", err, obs)
		}
	}
}
