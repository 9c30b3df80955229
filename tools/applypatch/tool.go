package applypatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/fileeditor"
)

// Name is the tool's name, as OpenAI's hosted tool and the Agents SDK call it.
const Name = "apply_patch"

// Statuses of a call, as apply_patch_call_output has them.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// Action is the tool's input: the hosted tool's one operation, or the
// freeform envelope (several files in one patch).
type Action struct {
	Operation *Operation `json:"operation,omitempty" jsonschema:"One file operation, as the hosted apply_patch tool sends it. Give operation or patch, not both."`
	Patch     *string    `json:"patch,omitempty" jsonschema:"A whole patch in the freeform envelope: *** Begin Patch, file sections (*** Add File: / *** Delete File: / *** Update File: with optional *** Move to:), *** End Patch. Give operation or patch, not both."`
}

// Output is the structured result (Observation.Structured): the fields of
// apply_patch_call_output plus what was done to each file.
type Output struct {
	Status string       `json:"status" jsonschema:"completed or failed."`
	Output string       `json:"output" jsonschema:"What was done, or why nothing was."`
	Files  []FileResult `json:"files,omitempty" jsonschema:"The files changed, in the patch's order (none when it failed)."`
}

// FileResult is what a patch did to one file.
type FileResult struct {
	Type   string `json:"type" jsonschema:"create_file, update_file or delete_file."`
	Path   string `json:"path" jsonschema:"The absolute path of the file."`
	MoveTo string `json:"move_to,omitempty" jsonschema:"The absolute path it was moved to."`
	Hunks  int    `json:"hunks,omitempty" jsonschema:"Hunks applied (update_file)."`
	Fuzz   int    `json:"fuzz,omitempty" jsonschema:"0 if every hunk matched exactly; 1 per line matched ignoring trailing whitespace, 100 ignoring surrounding whitespace, 10000 for an End of File context found before the end."`
}

const description = `Edit files with a patch. Give either ` + "`operation`" + ` (one file, as OpenAI's hosted apply_patch tool sends it) or ` + "`patch`" + ` (several files in one envelope).

operation: {"type": "create_file", "path": P, "diff": "+line\n+line\n"} | {"type": "update_file", "path": P, "diff": V4A hunks, "move_to"?: Q} | {"type": "delete_file", "path": P}

patch:
*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-print("Hi")
+print("Hello, world!")
*** Delete File: obsolete.txt
*** End Patch

A V4A hunk starts with @@, optionally followed by a line of the file to search from (stack several @@ lines to narrow the search, e.g. @@ class A then @@ def m():). Its lines start with a space (context), - (removed) or + (added). Show 3 lines of context above and below each change. End a hunk that must match at the end of the file with *** End of File.

File references are relative to the working directory, NEVER ABSOLUTE. A patch applies whole or not at all: if any hunk fails, no file is changed and the error names the hunk and the lines it looked for.`

// Definition is the tool as a model sees it; dir is the working directory
// paths resolve against.
func Definition(dir string) tools.Definition {
	desc := description
	if dir != "" {
		desc += "\n\nThe working directory is: " + dir
	}
	return tools.Definition{
		Name:        Name,
		Description: desc,
		InputSchema: tools.SchemaFor[Action](func(s *jsonschema.Schema) {
			op := s.Properties["operation"]
			if len(op.Types) == 2 { // *Operation: ["null","object"]
				op = op.CloneSchemas()
			}
			if t := op.Properties["type"]; t != nil {
				t.Enum = []any{OpCreate, OpUpdate, OpDelete}
			}
			s.Properties["operation"] = op
		}),
		OutputSchema: tools.SchemaFor[Output](),
		Annotations: tools.Annotations{
			Title:           Name,
			ReadOnlyHint:    false,
			DestructiveHint: true,
			IdempotentHint:  false,
			OpenWorldHint:   false,
		},
	}
}

// Params are the factory's parameters: file_editor's, plus FileEditor to
// serve file_editor from the same executor, so that its undo_edit reverts
// a patch file by file.
type Params struct {
	fileeditor.Params
	FileEditor bool `json:"file_editor,omitempty"`
}

// Factory makes apply_patch (and file_editor when params ask) for a session.
func Factory(env tools.Env, params json.RawMessage) ([]*tools.Tool, error) {
	var p Params
	if err := tools.DecodeParams(params, &p); err != nil {
		return nil, fmt.Errorf("applypatch: params: %w", err)
	}
	fe, err := fileeditor.NewExecutor(fileeditor.Options{Workspace: env.Workspace, Root: p.Root, MaxFileBytes: p.MaxFileBytes})
	if err != nil {
		return nil, err
	}
	dir := env.Dir
	if dir == "" {
		dir = env.Workspace
	}
	x, err := NewExecutor(dir, fe)
	if err != nil {
		_ = fe.Close()
		return nil, err
	}
	var made []*tools.Tool
	if p.FileEditor {
		t, err := tools.New(fileeditor.Definition(env.Workspace, p.MaxFileBytes), tools.Executor[fileeditor.Action](fe))
		if err != nil {
			_ = fe.Close()
			return nil, err
		}
		made = append(made, t)
	}
	t, err := tools.NewFunc(Definition(dir), x.Call, fe)
	if err != nil {
		_ = fe.Close()
		return nil, err
	}
	return append(made, t), nil
}

// Executor applies patches under a working directory through a file
// editor, whose locks, encodings, atomic writes and undo history it shares.
type Executor struct {
	dir string
	fe  *fileeditor.Executor
}

// NewExecutor returns an executor resolving paths against dir (absolute).
func NewExecutor(dir string, fe *fileeditor.Executor) (*Executor, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("applypatch: working directory %q is not absolute", dir)
	}
	return &Executor{dir: filepath.Clean(dir), fe: fe}, nil
}

// Close closes the file editor.
func (x *Executor) Close() error { return x.fe.Close() }

// Call applies one action. A patch that does not apply is an IsError
// observation with status failed; a Go error means the call did not happen.
func (x *Executor) Call(ctx context.Context, a Action) (*tools.Observation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ops []Operation
	switch {
	case a.Operation != nil && a.Patch != nil:
		return failed("Give either operation or patch, not both."), nil
	case a.Operation != nil:
		ops = []Operation{*a.Operation}
	case a.Patch != nil:
		var err error
		if ops, err = ParsePatch(*a.Patch); err != nil {
			return failed("Invalid patch: %v", err), nil
		}
	default:
		return failed("Give operation (one file operation) or patch (a *** Begin Patch envelope)."), nil
	}
	res, err := x.Apply(ctx, ops)
	if err != nil {
		if ce := ctx.Err(); ce != nil {
			return nil, ce
		}
		var fe *fileeditor.BatchError
		var he *HunkError
		var ue *usageError
		if !errors.As(err, &fe) && !errors.As(err, &he) && !errors.As(err, &ue) {
			return nil, err
		}
		return failed("%v", err), nil
	}
	lines := make([]string, len(res))
	for i, r := range res {
		lines[i] = describe(x.rel(r.Path), r)
		if r.MoveTo != "" {
			lines[i] = describe(x.rel(r.Path)+" -> "+x.rel(r.MoveTo), r)
		}
	}
	text := strings.Join(lines, "\n")
	return tools.TextResult(text, Output{Status: StatusCompleted, Output: text, Files: res}), nil
}

func describe(name string, r FileResult) string {
	switch r.Type {
	case OpCreate:
		return "Created " + name
	case OpDelete:
		return "Deleted " + name
	}
	s := fmt.Sprintf("Updated %s (%d hunk%s", name, r.Hunks, plural(r.Hunks))
	if r.Fuzz > 0 {
		s += fmt.Sprintf(", fuzz %d: some context matched only ignoring whitespace", r.Fuzz)
	}
	return s + ")"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func (x *Executor) rel(p string) string {
	if r, err := filepath.Rel(x.dir, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func failed(format string, args ...any) *tools.Observation {
	msg := fmt.Sprintf(format, args...)
	obs := tools.Errorf("%s", msg)
	obs.Structured = Output{Status: StatusFailed, Output: msg}
	return obs
}

// usageError is a patch refused before any file is read.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// resolve turns a path of the patch into an absolute one under the
// working directory. Relative paths are the contract; an absolute path is
// taken only when it lies in the working directory (the SDK's sandbox
// editor does the same), and no path may leave it.
func (x *Executor) resolve(p string) (string, error) {
	p = strings.TrimSpace(p)
	var abs string
	if filepath.IsAbs(p) {
		abs = filepath.Clean(p)
	} else {
		abs = filepath.Join(x.dir, p)
	}
	if abs == x.dir || (x.dir != "/" && !strings.HasPrefix(abs, x.dir+"/")) {
		return "", usagef("%s: file references must be relative to the working directory %s and stay inside it (NEVER ABSOLUTE).", p, x.dir)
	}
	return abs, nil
}

// Apply checks every operation and, if all apply, makes them all; else it
// changes nothing and returns a *HunkError, *usageError or
// *fileeditor.BatchError saying why.
func (x *Executor) Apply(ctx context.Context, ops []Operation) ([]FileResult, error) {
	if len(ops) == 0 {
		return nil, usagef("The patch has no operations.")
	}
	type planned struct {
		op       Operation
		src, dst string
	}
	plans := make([]planned, len(ops))
	var paths []string
	seen := map[string]string{}
	claim := func(abs, given string) error {
		if prev, dup := seen[abs]; dup {
			return usagef("The patch touches %s twice (as %q and %q): give each file one section.", abs, prev, given)
		}
		seen[abs] = given
		paths = append(paths, abs)
		return nil
	}
	for i, op := range ops {
		if err := op.Check(); err != nil {
			return nil, usagef("%v", err)
		}
		src, err := x.resolve(op.Path)
		if err != nil {
			return nil, err
		}
		if err := claim(src, op.Path); err != nil {
			return nil, err
		}
		plans[i] = planned{op: op, src: src}
		if op.MoveTo != nil {
			dst, err := x.resolve(*op.MoveTo)
			if err != nil {
				return nil, err
			}
			if err := claim(dst, *op.MoveTo); err != nil {
				return nil, err
			}
			plans[i].dst = dst
		}
	}
	var results []FileResult
	err := x.fe.Batch(ctx, paths, func(files *fileeditor.BatchFiles) ([]fileeditor.BatchWrite, error) {
		var writes []fileeditor.BatchWrite
		results = results[:0]
		for _, pl := range plans {
			op := pl.op
			f, err := files.Stat(pl.src)
			if err != nil {
				return nil, err
			}
			switch op.Type {
			case OpCreate:
				if f.Exists { // replaced, as the Codex CLI's Add File does: keep its bytes for undo
					if _, err := files.Read(pl.src); err != nil {
						return nil, err
					}
				}
				text, err := CreateText(*op.Diff)
				if err != nil {
					setPath(err, op.Path)
					return nil, err
				}
				writes = append(writes, fileeditor.BatchWrite{Path: pl.src, Text: text})
				results = append(results, FileResult{Type: OpCreate, Path: pl.src})
			case OpDelete:
				if !f.Exists {
					return nil, usagef("Cannot delete %s: it does not exist.", op.Path)
				}
				writes = append(writes, fileeditor.BatchWrite{Path: pl.src, Delete: true})
				results = append(results, FileResult{Type: OpDelete, Path: pl.src})
			case OpUpdate:
				if !f.Exists {
					return nil, usagef("Cannot update %s: it does not exist (use create_file or *** Add File: for a new file).", op.Path)
				}
				if f, err = files.Read(pl.src); err != nil {
					return nil, err
				}
				applied, err := ApplyDiff(f.Text, *op.Diff)
				if err != nil {
					setPath(err, op.Path)
					return nil, err
				}
				r := FileResult{Type: OpUpdate, Path: pl.src, Hunks: applied.Hunks, Fuzz: applied.Fuzz}
				if pl.dst == "" {
					writes = append(writes, fileeditor.BatchWrite{Path: pl.src, Text: applied.Text})
				} else {
					d, err := files.Stat(pl.dst)
					if err != nil {
						return nil, err
					}
					if d.Exists {
						return nil, usagef("Cannot move %s to %s: %s already exists.", op.Path, *op.MoveTo, *op.MoveTo)
					}
					writes = append(writes,
						fileeditor.BatchWrite{Path: pl.dst, Text: applied.Text, Like: pl.src},
						fileeditor.BatchWrite{Path: pl.src, Delete: true})
					r.MoveTo = pl.dst
				}
				results = append(results, r)
			}
		}
		return writes, nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

func setPath(err error, p string) {
	var he *HunkError
	if errors.As(err, &he) {
		he.Path = p
	}
}
