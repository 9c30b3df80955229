package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/applypatch"
	"github.com/sandboxd/sandboxd/tools/shell"
)

// Typed calls of OpenAI's tool contracts (a session created with ToolSet
// "openai" or "both"; docs/openai-tools.md). Their results are what the
// Agents SDK's ShellTool executor and ApplyPatchTool editor return.

// Shell runs a shell action (shell_call.action) and returns its output:
// one entry per command run, none after the first timeout.
func (s *Session) Shell(ctx context.Context, a shell.Action) (*shell.Output, error) {
	var out shell.Output
	if err := s.typedCall(ctx, shell.Name, a, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// LocalShell runs a local_shell action (an argv, no shell) on a session
// whose shell spec asks for local_shell.
func (s *Session) LocalShell(ctx context.Context, a shell.LocalAction) (*shell.Output, error) {
	var out shell.Output
	if err := s.typedCall(ctx, shell.LocalName, a, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ApplyPatch applies one operation (apply_patch_call.operation). A patch
// that does not apply is not an error: its Output has Status "failed" and
// says why.
func (s *Session) ApplyPatch(ctx context.Context, op applypatch.Operation) (*applypatch.Output, error) {
	return s.applyPatch(ctx, applypatch.Action{Operation: &op})
}

// ApplyPatchText applies a whole patch in the freeform envelope
// ("*** Begin Patch" ... "*** End Patch"): every file or none.
func (s *Session) ApplyPatchText(ctx context.Context, patch string) (*applypatch.Output, error) {
	return s.applyPatch(ctx, applypatch.Action{Patch: &patch})
}

func (s *Session) applyPatch(ctx context.Context, a applypatch.Action) (*applypatch.Output, error) {
	var out applypatch.Output
	if err := s.typedCall(ctx, applypatch.Name, a, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// typedCall calls a tool and decodes its structured output into out. An
// observation without one (the arguments were refused) is an error
// carrying its text.
func (s *Session) typedCall(ctx context.Context, name string, args, out any) error {
	obs, err := s.Call(ctx, name, args, nil)
	if err != nil {
		return err
	}
	return decodeStructured(name, obs, out)
}

func decodeStructured(name string, obs *tools.Observation, out any) error {
	if obs.Structured == nil {
		if obs.IsError {
			return fmt.Errorf("%s: %s", name, obs.Text())
		}
		return errors.New(name + ": the result has no structured output")
	}
	b, err := json.Marshal(obs.Structured)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: structured output: %w", name, err)
	}
	return nil
}
