package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

func init() {
	register(suite{
		name:  "skills",
		about: "a skill tool call next to the terminal's `echo`, and a skill's first call with a 1 s installer, through a real `sandboxd agent --stdio` on the host (no Docker)",
		run:   runSkillsSuite,
	})
}

// installerSleep is what the installer of the first-call scenario costs.
const installerSleep = time.Second

// writeBenchSkills writes two executable skills: hi (a bash script that
// echoes its argument) and slow-deps (the same, with an installer that
// takes installerSleep).
func writeBenchSkills(root string) error {
	files := map[string]string{
		"hi/SKILL.md": "---\nname: hi\ndescription: Echoes its argument.\n---\n# hi\n\n## Parameters\n\n" +
			"### text (required, positional position 0)\n\n**Type**: `str`\n\nWhat to echo.\n",
		"hi/scripts/hi.sh": "echo \"$1\"\n",
		"slow-deps/SKILL.md": "---\nname: slow-deps\ndescription: Echoes its argument after a 1 s installer.\n---\n# slow-deps\n\n## Parameters\n\n" +
			"### text (required, positional position 0)\n\n**Type**: `str`\n\nWhat to echo.\n",
		"slow-deps/scripts/hi.sh":   "echo \"$1\"\n",
		"slow-deps/deps/install.sh": fmt.Sprintf("sleep %g\n", installerSleep.Seconds()),
	}
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func runSkillsSuite(ctx context.Context, e *env) ([]row, error) {
	bin, err := e.sandboxdBinary()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(e.tmp, "skills")
	if err := writeBenchSkills(root); err != nil {
		return nil, err
	}
	ws := filepath.Join(e.tmp, "skills-workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, err
	}
	params, err := json.Marshal(map[string]any{"dir": root, "allow": []string{"hi", "slow-deps"}})
	if err != nil {
		return nil, err
	}
	specs, err := json.Marshal(append(builtin.DefaultSpecs(), tools.Spec{Name: sandbox.SkillsFactory, Params: params}))
	if err != nil {
		return nil, err
	}
	start := func(state string) (*agentProc, error) {
		return startAgent(bin, ws, state, e.log, "--tools", string(specs))
	}
	call := func(a *agentProc, tool string, args map[string]any, want string) error {
		raw, _ := json.Marshal(args)
		cctx, cancel := context.WithTimeout(ctx, agentTimeout)
		defer cancel()
		obs, err := a.cli.Call(cctx, tool, raw, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", tool, err)
		}
		if obs.IsError || !strings.Contains(obs.Text(), want) {
			return fmt.Errorf("%s: %.300s", tool, obs.Text())
		}
		return nil
	}

	a, err := start(filepath.Join(e.tmp, "skills-state"))
	if err != nil {
		return nil, err
	}
	defer a.stop()
	echo, err := measure(e.n(500), 20, func() error { return call(a, "terminal", map[string]any{"command": echoCommand}, "hi") })
	if err != nil {
		return nil, err
	}
	skill, err := measure(e.n(500), 20, func() error { return call(a, "hi", map[string]any{"text": "hi"}, "hi") })
	if err != nil {
		return nil, err
	}
	twice, twiceMet := ratioAtMost(2)
	rows := []row{
		{scenario: "terminal `" + echoCommand + "` (baseline)", s: echo},
		{scenario: "skill tool call (bash script echoing its argument)", s: skill, baseline: "terminal `" + echoCommand + "`, same agent", base: echo, target: twice, met: twiceMet},
	}
	e.logf("  skill call p50 %s, terminal echo p50 %s", ms(skill.p50), ms(echo.p50))

	// The first call of a skill with a 1 s installer: a fresh session each
	// time (installers run once per session).
	var firsts, sleeps []time.Duration
	for i := range e.n(5) {
		fresh, err := start(filepath.Join(e.tmp, fmt.Sprintf("skills-first-%d", i)))
		if err != nil {
			return rows, err
		}
		began := time.Now()
		err = call(fresh, "slow-deps", map[string]any{"text": "hi"}, "hi")
		firsts = append(firsts, time.Since(began))
		fresh.stop()
		if err != nil {
			return rows, err
		}
		sleeps = append(sleeps, installerSleep)
	}
	near, nearMet := ratioAtMost(1.2)
	rows = append(rows, row{
		scenario: "first call of a skill with a 1 s installer (fresh session)", s: sampleOfDurations(firsts),
		baseline: "the installer's own 1 s", base: sampleOfDurations(sleeps), target: near, met: nearMet,
	})
	return rows, nil
}
