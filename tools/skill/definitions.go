package skill

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
)

const (
	// LoadName is the name of the tool that loads a skill.
	LoadName = "load_skill"
	// FactoryName is the name of the factory of the skill tools in a
	// tools.Registry (tools/builtin registers it; only sessions with
	// skills ask for it).
	FactoryName = "skills"
	// MountDir is where a session's skills are inside the sandbox.
	MountDir = "/skills"
	// CatalogBudget bounds the catalog in load_skill's description, in
	// characters (Codex's default: about 2% of a context window).
	CatalogBudget = 8000
	// MaxNameLen is the longest tool name model APIs take.
	MaxNameLen = 64
	// minDescription is the length descriptions are shortened to, at the
	// least, before skills are dropped from the catalog.
	minDescription = 60
)

// nameByte reports whether c may be in a tool name.
func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// plan is what Definitions and the executor share, so the daemon lists
// exactly the tools the agent serves.
type plan struct {
	load     *tools.Definition        // nil without skills
	keys     map[string]*skills.Skill // load_skill's names
	keyOf    map[*skills.Skill]string
	tools    []planned // executable skills that are tools
	warnings []string
}

type planned struct {
	def   tools.Definition
	skill *skills.Skill
}

// Definitions returns the tools a session with skills ss serves: load_skill
// (when ss is not empty) and one tool per executable skill, in that order,
// the skills by path. builtinNames are the names skill tools must not take
// (the built-in tools'). warnings say what was left out and why: a skill
// whose tool name is taken, skills dropped from the catalog to keep it
// within CatalogBudget, an executable skill whose parameters cannot make a
// tool. It is pure: the daemon calls it with its own copy of the skills.
func Definitions(ss []*skills.Skill, builtinNames []string) (defs []tools.Definition, warnings []string) {
	p := makePlan(ss, builtinNames)
	if p.load != nil {
		defs = append(defs, *p.load)
	}
	for _, t := range p.tools {
		defs = append(defs, t.def)
	}
	return defs, p.warnings
}

func makePlan(ss []*skills.Skill, builtinNames []string) plan {
	p := plan{keys: map[string]*skills.Skill{}, keyOf: map[*skills.Skill]string{}}
	sorted := make([]*skills.Skill, 0, len(ss))
	for _, s := range ss {
		if s != nil {
			sorted = append(sorted, s)
		}
	}
	slices.SortStableFunc(sorted, func(a, b *skills.Skill) int { return cmp.Compare(a.Path, b.Path) })
	if len(sorted) == 0 {
		return p
	}

	// load_skill's names: a skill's name, or its path when an earlier skill
	// has the name.
	var keys []string
	for _, s := range sorted {
		key := s.Name
		if key == "" {
			key = s.Path
		}
		if other, taken := p.keys[key]; taken {
			if _, pathTaken := p.keys[s.Path]; pathTaken || s.Path == "" {
				p.warnf("skill %q is left out: its name %q and its path are taken by skill %q", s.Path, key, other.Path)
				continue
			}
			p.warnf("skills %q and %q are both named %q: load_skill knows the second by its path %q", other.Path, s.Path, key, s.Path)
			key = s.Path
		}
		p.keys[key] = s
		p.keyOf[s] = key
		keys = append(keys, key)
	}
	p.load = p.loadDefinition(sorted, keys)

	taken := map[string]string{LoadName: "the built-in tool " + strconv.Quote(LoadName)}
	for _, n := range builtinNames {
		taken[n] = "the built-in tool " + strconv.Quote(n)
	}
	for _, s := range sorted {
		if s.Exec == nil || p.keyOf[s] == "" {
			continue
		}
		if err := checkExec(s.Exec); err != nil {
			p.warnf("skill %q is not a tool: %v", s.Path, err)
			continue
		}
		name := ToolName(s)
		if owner, dup := taken[name]; dup {
			p.warnf("skill %q is not a tool: its tool name %q is taken by %s", s.Path, name, owner)
			continue
		}
		taken[name] = "skill " + strconv.Quote(s.Path)
		p.tools = append(p.tools, planned{def: toolDefinition(s, name, p.keyOf[s]), skill: s})
	}
	return p
}

func (p *plan) warnf(format string, args ...any) {
	p.warnings = append(p.warnings, fmt.Sprintf(format, args...))
}

// ToolName is the tool name of an executable skill: its name (or the last
// element of its path) made a valid function name, ^[A-Za-z0-9_-]{1,64}$:
// other characters become '_', and a longer name is cut with a short hash
// of the whole name, so two long names sharing a prefix stay apart.
func ToolName(s *skills.Skill) string {
	name := s.Name
	if name == "" {
		name = path.Base(s.Path)
	}
	b := []byte(name)
	for i, c := range b {
		if !nameByte(c) {
			b[i] = '_'
		}
	}
	out := string(b)
	if out == "" {
		out = "skill"
	}
	if len(out) > MaxNameLen {
		sum := sha256.Sum256([]byte(name))
		out = out[:MaxNameLen-9] + "_" + hex.EncodeToString(sum[:4])
	}
	return out
}

const loadDescription = `Load a skill: instructions for a kind of task, often with scripts and reference files. When a task matches the description of a skill listed below, call this tool with the skill's name before doing the task, then follow the instructions it returns.
* The result is the skill's SKILL.md (its instructions), the skill's folder under ` + MountDir + ` (read-only) and the list of the files in it; relative paths in the instructions are relative to that folder. Read or run those files with your other tools when the instructions say so.
* A skill with dependencies has them installed the first time it is used in this session (this call may then take a while).`

func (p *plan) loadDefinition(sorted []*skills.Skill, keys []string) *tools.Definition {
	var entries []catalogEntry
	for _, s := range sorted {
		if key := p.keyOf[s]; key != "" && !s.Hidden {
			entries = append(entries, catalogEntry{name: key, desc: oneLine(s.Description)})
		}
	}
	lines, shortenedTo, dropped := fitCatalog(entries, CatalogBudget)
	if len(dropped) > 0 {
		p.warnf("the catalog of %s is over its budget of %d characters: descriptions are shortened to %d characters and %d skills are left out of it (they can still be loaded by name): %s",
			LoadName, CatalogBudget, shortenedTo, len(dropped), strings.Join(dropped, ", "))
	} else if shortenedTo > 0 {
		p.warnf("the catalog of %s is over its budget of %d characters: descriptions are shortened to %d characters", LoadName, CatalogBudget, shortenedTo)
	}
	desc := loadDescription
	if len(lines) > 0 {
		desc += "\n\nAvailable skills:\n" + strings.Join(lines, "\n")
	}
	enum := make([]any, len(keys))
	for i, k := range keys {
		enum[i] = k
	}
	return &tools.Definition{
		Name:        LoadName,
		Description: desc,
		InputSchema: &jsonschema.Schema{
			Type: "object",
			Properties: map[string]*jsonschema.Schema{
				"name": {Type: "string", Description: "The name of the skill, as listed in this tool's description.", Enum: enum},
			},
			Required:             []string{"name"},
			AdditionalProperties: falseSchema(),
		},
		Annotations: tools.Annotations{
			Title:           LoadName,
			ReadOnlyHint:    true,
			DestructiveHint: false,
			IdempotentHint:  true,
			OpenWorldHint:   false,
		},
	}
}

func falseSchema() *jsonschema.Schema { return &jsonschema.Schema{Not: &jsonschema.Schema{}} }

type catalogEntry struct{ name, desc string }

// fitCatalog renders the catalog's lines ("- name: description") within
// budget characters: whole when they fit; else every description is cut to
// the longest length that fits (at least minDescription, marked with "…");
// else, at minDescription, skills are dropped from the end until the rest
// fits. It returns the length descriptions were cut to (0: not cut) and the
// names of the skills dropped.
func fitCatalog(entries []catalogEntry, budget int) (lines []string, shortenedTo int, dropped []string) {
	cost := func(es []catalogEntry, limit int) int {
		n := 0
		for _, e := range es {
			n += len("- : \n") + utf8.RuneCountInString(e.name) + min(utf8.RuneCountInString(e.desc), limit)
		}
		return n
	}
	longest := 0
	for _, e := range entries {
		longest = max(longest, utf8.RuneCountInString(e.desc))
	}
	limit := longest
	if cost(entries, longest) > budget {
		// The largest limit in [minDescription, longest) that fits.
		lo, hi := minDescription, longest-1
		limit = minDescription
		for lo <= hi {
			mid := (lo + hi) / 2
			if cost(entries, mid) <= budget {
				limit, lo = mid, mid+1
			} else {
				hi = mid - 1
			}
		}
		if limit < longest {
			shortenedTo = limit
		}
		for len(entries) > 0 && cost(entries, limit) > budget {
			dropped = append(dropped, entries[len(entries)-1].name)
			entries = entries[:len(entries)-1]
		}
		slices.Reverse(dropped)
	}
	for _, e := range entries {
		lines = append(lines, "- "+e.name+": "+shorten(e.desc, limit))
	}
	return lines, shortenedTo, dropped
}

// shorten cuts s to at most n characters, the last one "…" when cut.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:max(n-1, 0)]), " ") + "…"
}

// oneLine collapses runs of white space (newlines included) to one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

var (
	validParam  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)
	validOption = regexp.MustCompile(`^--?[A-Za-z0-9][A-Za-z0-9_.-]*$`)
)

// checkExec reports what keeps an executable skill from being a tool: an
// entry that is not a relative path inside its folder, or parameters that
// make no command line (a bad or repeated name, an unknown kind or type,
// two positionals at one position, a variadic positional before another).
func checkExec(e *skills.Exec) error {
	if _, err := cleanRel(e.Entry); err != nil {
		return fmt.Errorf("its script %q: %w", e.Entry, err)
	}
	names := map[string]bool{}
	positions := map[int]string{}
	lastPos, variadicAt := -1, -1
	for _, p := range e.Params {
		if !validParam.MatchString(p.Name) {
			return fmt.Errorf("parameter name %q is not a valid argument name", p.Name)
		}
		if names[p.Name] {
			return fmt.Errorf("parameter %q is declared twice", p.Name)
		}
		names[p.Name] = true
		switch p.Type {
		case "", "string", "integer", "number", "boolean", "array":
		default:
			return fmt.Errorf("parameter %q has the unknown type %q", p.Name, p.Type)
		}
		switch p.Kind {
		case skills.Positional:
			if p.Position < 0 {
				return fmt.Errorf("parameter %q has the negative position %d", p.Name, p.Position)
			}
			if other, dup := positions[p.Position]; dup {
				return fmt.Errorf("parameters %q and %q are both at position %d", other, p.Name, p.Position)
			}
			positions[p.Position] = p.Name
			lastPos = max(lastPos, p.Position)
			if p.Variadic || p.Type == "array" {
				variadicAt = max(variadicAt, p.Position)
			}
		case skills.Named, skills.Flag:
			if p.Option != "" && !validOption.MatchString(p.Option) {
				return fmt.Errorf("parameter %q has the option %q, not an option like --name", p.Name, p.Option)
			}
		default:
			return fmt.Errorf("parameter %q has the unknown kind %q", p.Name, p.Kind)
		}
	}
	if variadicAt >= 0 && variadicAt != lastPos {
		return fmt.Errorf("the list parameter %q at position %d is not the last positional", positions[variadicAt], variadicAt)
	}
	return nil
}

// option is a named parameter's or flag's spelling on the command line.
func option(p skills.Param) string {
	if p.Option != "" {
		return p.Option
	}
	return "--" + p.Name
}

func isList(p skills.Param) bool { return p.Variadic || p.Type == "array" }

// itemType is the JSON type of a list parameter's elements.
func itemType(p skills.Param) string {
	switch p.Type {
	case "integer", "number", "boolean":
		return p.Type
	}
	return "string"
}

func paramSchema(p skills.Param) *jsonschema.Schema {
	s := &jsonschema.Schema{Type: cmp.Or(p.Type, "string"), Description: p.Description}
	switch {
	case p.Kind == skills.Flag:
		s.Type = "boolean"
	case isList(p):
		s.Type, s.Items = "array", &jsonschema.Schema{Type: itemType(p)}
		if p.Required {
			one := 1
			s.MinItems = &one
		}
	}
	return s
}

func inputSchema(e *skills.Exec) *jsonschema.Schema {
	s := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{}, AdditionalProperties: falseSchema()}
	for _, p := range e.Params {
		s.Properties[p.Name] = paramSchema(p)
		s.PropertyOrder = append(s.PropertyOrder, p.Name)
		if p.Required {
			s.Required = append(s.Required, p.Name)
		}
	}
	return s
}

// usage is the command line a tool runs, with placeholders:
// "run.sh <target> [<seeds>...] [--mutator VALUE] [--reset]".
func usage(e *skills.Exec) string {
	parts := []string{path.Base(e.Entry)}
	pos := positionals(e.Params)
	for _, p := range pos {
		w := "<" + p.Name + ">"
		if isList(p) {
			w += "..."
		}
		if !p.Required {
			w = "[" + w + "]"
		}
		parts = append(parts, w)
	}
	for _, p := range e.Params {
		var w string
		switch p.Kind {
		case skills.Named:
			w = option(p) + " <" + p.Name + ">"
			if isList(p) {
				w += " (repeated per value)"
			}
		case skills.Flag:
			w = option(p)
		default:
			continue
		}
		if !p.Required {
			w = "[" + w + "]"
		}
		parts = append(parts, w)
	}
	return strings.Join(parts, " ")
}

// positionals are the positional parameters by position.
func positionals(params []skills.Param) []skills.Param {
	var pos []skills.Param
	for _, p := range params {
		if p.Kind == skills.Positional {
			pos = append(pos, p)
		}
	}
	slices.SortStableFunc(pos, func(a, b skills.Param) int { return cmp.Compare(a.Position, b.Position) })
	return pos
}

func toolDefinition(s *skills.Skill, name, key string) tools.Definition {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(s.Description))
	fmt.Fprintf(&b, "\n\nRuns the script of skill %q (%s/%s/%s) in the session's workspace, as: %s",
		s.Path, MountDir, s.Path, s.Exec.Entry, usage(s.Exec))
	b.WriteString("\n* Each argument is passed as one command-line argument, never through a shell; a positional value may not begin with '-'.")
	fmt.Fprintf(&b, "\n* It is stopped after %s. The result is its output (stdout and stderr) and exit code; a non-zero exit code is an error.", seconds(timeoutOf(s)))
	if s.ReturnsJSON {
		b.WriteString(" Its stdout is JSON, returned as structured content too.")
	}
	fmt.Fprintf(&b, "\n* For the skill's full instructions, call %s with name %q.", LoadName, key)
	return tools.Definition{
		Name:        name,
		Description: b.String(),
		InputSchema: inputSchema(s.Exec),
		Annotations: tools.Annotations{
			Title:           s.Name,
			ReadOnlyHint:    false,
			DestructiveHint: true,
			IdempotentHint:  false,
			OpenWorldHint:   true,
		},
	}
}

func timeoutOf(s *skills.Skill) time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return skills.DefaultTimeout
}

func installTimeoutOf(s *skills.Skill) time.Duration {
	if s.InstallTimeout > 0 {
		return s.InstallTimeout
	}
	return skills.DefaultInstallTimeout
}

// seconds words a duration for a model: "60 seconds", "1.5 seconds".
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		n := int64(d / time.Second)
		if n == 1 {
			return "1 second"
		}
		return strconv.FormatInt(n, 10) + " seconds"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " seconds"
}

// cleanRel checks that p is a relative slash path that stays inside its
// folder and returns it cleaned.
func cleanRel(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("empty path")
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("a NUL byte in the path")
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("an absolute path; it must be relative to the skill's folder")
	}
	c := path.Clean(p)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("the path leads outside the skill's folder")
	}
	return c, nil
}
