package sandbox

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/bash"
	"github.com/sandboxd/sandboxd/tools/builtin"
	"github.com/sandboxd/sandboxd/tools/shell"
)

// AgentCommand is the argv of a session's main process: the agent serving
// its stdio (the stream Runtime.Start returns) and its unix socket (for
// ProxyCommand after a daemon restart) at once, with the session's tools.
// It is built here, not in a runtime, so that every runtime starts the
// same agent and only has to run this argv.
//
// The agent starts its terminal in its own working directory ("--dir ."),
// which the runtime sets (see Spec): Cwd, or when Cwd is empty the image's
// WORKDIR, which only the runtime knows. Files may be transferred in
// WorkspaceDir and in each of EditablePaths (--transfer-root).
func AgentCommand(o SessionOptions) ([]string, error) {
	cmd := []string{
		AgentPath, "agent",
		"--stdio",
		"--socket", AgentSocket,
		"--workspace", WorkspaceDir,
		"--state-dir", AgentStateDir,
		"--dir", ".",
	}
	for _, p := range o.EditablePaths {
		cmd = append(cmd, "--transfer-root", p)
	}
	specs, err := AgentToolSpecs(o)
	if err != nil || specs == nil {
		return cmd, err
	}
	b, err := json.Marshal(specs)
	if err != nil {
		return nil, err
	}
	return append(cmd, "--tools", string(b)), nil
}

// AgentToolSpecs are the tools the agent of a session serves: the
// session's tools, with the terminal started in Cwd, its soft timeout
// Terminal.NoChangeTimeout and, with ShellInitImage, reading the image's
// rc files (unless its own params set "dir", "soft_timeout_seconds" or
// "shell_init"). It is nil when the agent's defaults (every
// built-in tool, the terminal in WorkspaceDir with its default soft
// timeout) are what the session asks for, so that the command line carries
// no --tools.
func AgentToolSpecs(o SessionOptions) ([]tools.Spec, error) {
	terminal := map[string]any{}
	if o.Cwd != "" && o.Cwd != WorkspaceDir {
		terminal["dir"] = o.Cwd
	}
	if t := o.Terminal.NoChangeTimeout; t != 0 && t != bash.DefaultSoftTimeout {
		terminal["soft_timeout_seconds"] = t.Seconds()
	}
	if o.ShellInit == ShellInitImage {
		terminal["shell_init"] = bash.ShellInitImage
	}
	if len(o.Tools) == 0 && o.ToolSet == "" && len(terminal) == 0 && len(o.Skills) == 0 {
		return nil, nil
	}
	specs := slices.Clone(o.Tools)
	if len(specs) == 0 {
		var err error
		if specs, err = builtin.SetSpecs(o.ToolSet); err != nil {
			return nil, err
		}
	}
	if len(o.Skills) > 0 && !slices.ContainsFunc(specs, func(s tools.Spec) bool { return s.Name == SkillsFactory }) {
		specs = append(specs, skillsSpec(o))
	}
	if len(terminal) == 0 {
		return specs, nil
	}
	for i, s := range specs {
		if s.Name != bash.Name && s.Name != shell.Name { // shell's params are the terminal's
			continue
		}
		params := map[string]json.RawMessage{}
		if len(s.Params) > 0 {
			if err := json.Unmarshal(s.Params, &params); err != nil {
				return nil, fmt.Errorf("tools: params of %s: %w", s.Name, err)
			}
		}
		for k, v := range terminal {
			if _, set := params[k]; !set {
				params[k], _ = json.Marshal(v)
			}
		}
		specs[i].Params, _ = json.Marshal(params)
	}
	return specs, nil
}

// ProxyCommand is the argv that bridges a stream (a runtime's exec) to the
// agent's unix socket; Runtime.Connect runs it in the session's sandbox.
func ProxyCommand() []string {
	return []string{AgentPath, "agent-proxy", "--socket", AgentSocket}
}
