package skill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/internal/output"
)

const (
	// DefaultMaxOutputChars is how much of a call's output the model is
	// shown, as the terminal's default (OpenHands' MAX_CMD_OUTPUT_SIZE).
	DefaultMaxOutputChars = 30000
	// maxJSONBytes bounds the stdout a returns_json skill may have parsed.
	maxJSONBytes = 8 << 20
	// maxBodyChars bounds the SKILL.md body load_skill returns; the rest
	// is read from the file.
	maxBodyChars = 100000
	// outputPrefix names the files of cut outputs in the state directory.
	outputPrefix = "skill_output_"
)

// Options configure an Executor.
type Options struct {
	// Dir is where the skills are (MountDir in a sandbox): a skill's folder
	// is Dir/<Path>, unless the skill's Dir says otherwise.
	Dir string
	// Skills are the session's skills.
	Skills []*skills.Skill
	// BuiltinNames are the names skill tools must not take.
	BuiltinNames []string
	// Workspace is the scripts' working directory.
	Workspace string
	// StateDir holds the installers' markers and logs and the cut outputs
	// (under StateDir/skills); a temporary directory when empty.
	StateDir string
	// MaxOutputChars is how much of a call's output is shown; default
	// DefaultMaxOutputChars.
	MaxOutputChars int
	// Environ is the environment the scripts start from; nil is this
	// process's.
	Environ []string
	// Logger receives the warnings; nil is slog.Default().
	Logger *slog.Logger
}

// Executor runs a session's skill tools. It is safe for concurrent use.
type Executor struct {
	opts     Options
	plan     plan
	stateDir string
	ownState bool
	env      []string // without SKILL_DIR
	log      *slog.Logger

	base context.Context // ends at Close: running scripts and installers are killed
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu       sync.Mutex
	installs map[string]*install
	closed   bool
}

// New makes the executor of a session's skills. Nothing runs until a call.
func New(opts Options) (*Executor, error) {
	if opts.MaxOutputChars <= 0 {
		opts.MaxOutputChars = DefaultMaxOutputChars
	}
	x := &Executor{opts: opts, log: opts.Logger, installs: map[string]*install{}}
	if x.log == nil {
		x.log = slog.Default()
	}
	x.log = x.log.With("component", "skills")
	state := opts.StateDir
	if state == "" {
		dir, err := os.MkdirTemp("", "sandboxd-skills-")
		if err != nil {
			return nil, fmt.Errorf("skills: state directory: %w", err)
		}
		state, x.ownState = dir, true
	} else {
		state = filepath.Join(state, "skills")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return nil, fmt.Errorf("skills: state directory: %w", err)
		}
	}
	x.stateDir = state
	x.env = scriptEnv(opts.Environ, x.log)
	x.plan = makePlan(opts.Skills, opts.BuiltinNames)
	x.base, x.stop = context.WithCancel(context.Background())
	return x, nil
}

// scriptEnv is the environment of scripts and installers: environ (this
// process's when nil) with $HOME/.local/bin first on PATH, created if
// missing, so that what an installer puts there (pip install --user, a
// downloaded binary) is found. SKILL_DIR is added per call.
func scriptEnv(environ []string, log *slog.Logger) []string {
	if environ == nil {
		environ = os.Environ()
	}
	if log == nil {
		log = slog.Default()
	}
	var env []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "SKILL_DIR=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	path := envValue(environ, "PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	if home := envValue(environ, "HOME"); home != "" && filepath.IsAbs(home) {
		bin := filepath.Join(home, ".local", "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			log.Warn("skills: cannot create the PATH folder for installers", "dir", bin, "err", err)
		}
		// First, and once (the sandbox's PATH may already start with it).
		dirs := slices.DeleteFunc(filepath.SplitList(path), func(d string) bool { return d == bin })
		path = strings.Join(append([]string{bin}, dirs...), string(filepath.ListSeparator))
	}
	return append(env, "PATH="+path)
}

// Tools are the skill tools (Definitions' order) bound to x, and the
// warnings of Definitions. x is every tool's closer.
func (x *Executor) Tools() ([]*tools.Tool, []string) {
	var out []*tools.Tool
	if x.plan.load != nil {
		t, err := tools.NewFunc(*x.plan.load, x.load, x)
		if err != nil {
			panic(fmt.Sprintf("skill: %v", err)) // the schema is ours: a programming error
		}
		out = append(out, t)
	}
	for _, p := range x.plan.tools {
		s, name := p.skill, p.def.Name
		t, err := tools.NewFunc(p.def, func(ctx context.Context, raw json.RawMessage) (*tools.Observation, error) {
			return x.call(ctx, s, name, raw)
		}, x)
		if err != nil {
			panic(fmt.Sprintf("skill: %v", err)) // the schema is ours: a programming error
		}
		out = append(out, t)
	}
	return out, slices.Clone(x.plan.warnings)
}

// Close kills running scripts and installers and waits for them. It is
// idempotent.
func (x *Executor) Close() error {
	x.mu.Lock()
	x.closed = true
	x.mu.Unlock()
	x.stop()
	x.wg.Wait()
	if x.ownState {
		return os.RemoveAll(x.stateDir)
	}
	return nil
}

// begin registers a call that must end before Close returns; its context
// also ends at Close.
func (x *Executor) begin(ctx context.Context) (context.Context, func(), error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil, nil, tools.ErrClosed
	}
	x.wg.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(x.base, cancel)
	return ctx, func() { stop(); cancel(); x.wg.Done() }, nil
}

// folder is a skill's folder.
func (x *Executor) folder(s *skills.Skill) string {
	if s.Dir != "" {
		return s.Dir
	}
	return filepath.Join(x.opts.Dir, filepath.FromSlash(s.Path))
}

func (x *Executor) envFor(s *skills.Skill) []string {
	return append(slices.Clip(x.env), "SKILL_DIR="+x.folder(s))
}

// call runs one call of an executable skill.
func (x *Executor) call(ctx context.Context, s *skills.Skill, name string, raw json.RawMessage) (*tools.Observation, error) {
	ctx, done, err := x.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var args map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil {
		return tools.Errorf("Invalid arguments for tool %q: %v", name, err), nil
	}
	argv, err := Argv(s, x.folder(s), args)
	if err != nil {
		return tools.Errorf("Invalid arguments for tool %q: %v", name, err), nil
	}
	if err := x.ensureInstalled(ctx, s); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return tools.Errorf("%v", err), nil
	}

	acc := output.New(x.opts.MaxOutputChars, x.stateDir, outputPrefix)
	var stdout []byte
	jsonTooBig := false
	stream := tools.StreamFrom(ctx)
	timeout := timeoutOf(s)
	res := run(ctx, procSpec{
		argv:    argv,
		dir:     x.opts.Workspace,
		env:     x.envFor(s),
		timeout: timeout,
		split:   s.ReturnsJSON,
		out: func(stderr bool, p []byte) {
			acc.Add(p)
			if s.ReturnsJSON && !stderr && !jsonTooBig {
				if len(stdout)+len(p) > maxJSONBytes {
					jsonTooBig, stdout = true, nil
				} else {
					stdout = append(stdout, p...)
				}
			}
			stream(bytes.Clone(p)) // p is the reader's buffer, reused
		},
	})
	r := acc.Finish()
	if res.startErr != nil {
		return tools.Errorf("The script of skill %q could not start: %v", s.Path, startError(res.startErr)), nil
	}

	text := strings.ToValidUTF8(strings.TrimRight(r.Text, " \t\r\n"), "\uFFFD")
	var note string
	isErr := true
	switch {
	case res.timedOut:
		note = fmt.Sprintf("[The skill timed out after %s and was killed.]", seconds(timeout))
	case res.cancelled:
		note = "[The call was cancelled and the skill was killed.]"
	case res.signal != 0:
		note = fmt.Sprintf("[The skill was killed by signal %d (%s).]", int(res.signal), res.signal)
	default:
		note = fmt.Sprintf("[The skill exited with code %d.]", res.exit)
		isErr = res.exit != 0
	}
	obs := &tools.Observation{IsError: isErr}
	if s.ReturnsJSON && !res.timedOut && !res.cancelled {
		switch v, err := parseJSON(stdout); {
		case jsonTooBig:
			note += fmt.Sprintf("\n[Its stdout is larger than %d MiB and was not parsed as JSON.]", maxJSONBytes>>20)
		case errors.As(err, new(unfitJSON)):
			note += fmt.Sprintf("\n[Its stdout is valid JSON but is passed as text only: %v.]", err)
		case err != nil && !isErr:
			note += fmt.Sprintf("\n[The skill returns JSON, but its stdout is not valid JSON: %v.]", err)
		case err == nil:
			obs.Structured = v
		}
	}
	if text != "" {
		text += "\n"
	}
	obs.Content = []tools.Content{{Type: "text", Text: text + note}}
	return obs, nil
}

// parseJSON parses a returns_json skill's stdout. Structured content is an
// object (MCP's structuredContent): any other JSON value is returned as
// {"result": value}.
func parseJSON(stdout []byte) (any, error) {
	trimmed := bytes.TrimSpace(stdout)
	if len(trimmed) == 0 {
		return nil, errors.New("it is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	// JSON Go reads may still be more than clients can: too deep a
	// nesting, or a number out of a double's range.
	if err := tools.CheckStructured(v); err != nil {
		return nil, unfitJSON{err}
	}
	if _, ok := v.(map[string]any); ok {
		return v, nil
	}
	return map[string]any{"result": v}, nil
}

// unfitJSON is valid JSON that clients could not take as structured
// content (tools.CheckStructured).
type unfitJSON struct{ err error }

func (e unfitJSON) Error() string { return e.err.Error() }

// startError words why a script did not start.
func startError(err error) string {
	switch {
	case errors.Is(err, syscall.EACCES):
		return err.Error() + " (a script other than .sh or .py runs directly: it must be executable and start with #!)"
	case errors.Is(err, syscall.ENOEXEC):
		return err.Error() + " (a script other than .sh or .py must start with #!)"
	}
	return err.Error()
}

// loadAction is load_skill's input.
type loadAction struct {
	Name string `json:"name"`
}

// LoadOutput is load_skill's structured result.
type LoadOutput struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"`
	Folder    string   `json:"folder"`
	Resources []string `json:"resources"`
	// Tool is the skill's own tool, when it is executable.
	Tool string `json:"tool,omitempty"`
}

func (x *Executor) load(ctx context.Context, a loadAction) (*tools.Observation, error) {
	ctx, done, err := x.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	s, ok := x.plan.keys[a.Name]
	if !ok {
		names := make([]string, 0, len(x.plan.keys))
		for k := range x.plan.keys {
			names = append(names, k)
		}
		slices.Sort(names)
		return tools.Errorf("Unknown skill %q. The skills are: %s.", a.Name, strings.Join(names, ", ")), nil
	}
	folder := x.folder(s)
	file := filepath.Join(folder, "SKILL.md")
	data, err := os.ReadFile(file)
	if err != nil {
		return tools.Errorf("Cannot read the skill %q: %v", a.Name, err), nil
	}
	body := strings.TrimSpace(skillBody(strings.ToValidUTF8(string(data), "\uFFFD")))
	if r := []rune(body); len(r) > maxBodyChars {
		body = string(r[:maxBodyChars]) + fmt.Sprintf("\n\n[The instructions are longer than %d characters; read the rest from %s.]", maxBodyChars, file)
	}
	out := LoadOutput{Name: a.Name, Path: s.Path, Folder: folder, Resources: slices.Clone(s.Resources)}
	if out.Resources == nil {
		out.Resources = []string{}
	}
	for _, t := range x.plan.tools {
		if t.skill == s {
			out.Tool = t.def.Name
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "<skill_content name=\"%s\">\n%s\n\nSkill folder: %s (read-only). Relative paths in this skill are relative to it.\n", html.EscapeString(a.Name), body, folder)
	if out.Tool != "" {
		fmt.Fprintf(&b, "This skill's script is also the tool `%s`: call it rather than running the script yourself.\n", out.Tool)
	}
	b.WriteString("<skill_resources>\n")
	for _, r := range out.Resources {
		fmt.Fprintf(&b, "<file>%s</file>\n", html.EscapeString(r))
	}
	b.WriteString("</skill_resources>\n</skill_content>")
	obs := tools.TextResult(b.String(), out)

	// Loading a skill is its first use: its dependencies are installed now,
	// so that its scripts work from the terminal too.
	if err := x.ensureInstalled(ctx, s); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		obs.IsError = true
		obs.Content[0].Text = fmt.Sprintf("%v\n\nThe skill's instructions follow, but its scripts may not work without their dependencies.\n\n%s", err, obs.Content[0].Text)
	}
	return obs, nil
}

// skillBody is SKILL.md without its YAML front matter.
func skillBody(md string) string {
	md = strings.TrimPrefix(md, "\uFEFF")
	first, rest, ok := strings.Cut(md, "\n")
	if !ok || strings.TrimRight(first, " \t\r") != "---" {
		return md
	}
	for len(rest) > 0 {
		line, after, _ := strings.Cut(rest, "\n")
		if strings.TrimRight(line, " \t\r") == "---" {
			return after
		}
		rest = after
	}
	return md // no end of the front matter: all of it is shown
}
