package skills

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// SkillFile is the name of a skill's entry file.
const SkillFile = "SKILL.md"

// severity is how much an issue matters to the lenient loader; the strict
// validator reports every issue.
type severity int

const (
	// sevFatal: the skill cannot be used; the loader skips it.
	sevFatal severity = iota
	// sevWarn: the loader uses the skill and records a warning.
	sevWarn
	// sevStrict: the loader says nothing; only Validate reports it.
	sevStrict
)

// issue is one thing wrong with a skill.
type issue struct {
	sev   severity
	line  int // in SKILL.md; 0 when it is about no line
	field string
	msg   string
}

func (i issue) String() string {
	var b strings.Builder
	b.WriteString(SkillFile)
	if i.line > 0 {
		fmt.Fprintf(&b, ":%d", i.line)
	}
	if i.field != "" {
		b.WriteString(": ")
		b.WriteString(i.field)
	}
	b.WriteString(": ")
	b.WriteString(i.msg)
	return b.String()
}

// Parse reads the skill in folder dir of fsys (dir/SKILL.md and the files
// beside it), leniently: what it can forgive becomes Skill.Warnings, what
// makes the skill unusable is the error (the reason it is skipped). Path is
// dir; Root and Dir are left for the caller. It never panics.
func Parse(fsys fs.FS, dir string) (*Skill, error) {
	dir = path.Clean(dir)
	s, issues := parse(fsys, dir, path.Base(dir))
	var fatal []string
	for _, is := range issues {
		switch is.sev {
		case sevFatal:
			fatal = append(fatal, is.String())
		case sevWarn:
			if s != nil {
				s.Warnings = append(s.Warnings, is.String())
			}
		}
	}
	if len(fatal) > 0 {
		if len(fatal) > 3 {
			fatal = append(fatal[:3], fmt.Sprintf("and %d more", len(fatal)-3))
		}
		return nil, errors.New(strings.Join(fatal, "; "))
	}
	return s, nil
}

// parser holds one skill's parse.
type parser struct {
	fsys   fs.FS
	dir    string // slash path of the folder in fsys
	folder string // the folder's name, for the name check; "." when unknown
	issues []issue
	s      *Skill
}

func (p *parser) add(sev severity, line int, field, format string, args ...any) {
	p.issues = append(p.issues, issue{sev: sev, line: line, field: field, msg: fmt.Sprintf(format, args...)})
}

// rel is the fsys path of a file of the skill.
func (p *parser) rel(name string) string { return path.Join(p.dir, name) }

// isFile reports whether the skill's folder has a regular file at name (a
// slash path relative to the folder).
func (p *parser) isFile(name string) bool {
	if !fs.ValidPath(name) {
		return false
	}
	fi, err := fs.Stat(p.fsys, p.rel(name))
	return err == nil && fi.Mode().IsRegular()
}

// parse is the one parser behind Parse and Validate. It returns the skill
// (nil when SKILL.md could not be read as front matter and body) and every
// issue found.
func parse(fsys fs.FS, dir, folder string) (s *Skill, issues []issue) {
	p := &parser{fsys: fsys, dir: dir, folder: folder}
	defer func() {
		// The parser is written not to panic; this is the last line of
		// "never crash the daemon on a skill".
		if r := recover(); r != nil {
			s = nil
			issues = append(p.issues, issue{sev: sevFatal, msg: fmt.Sprintf("internal error while parsing: %v", r)})
		}
	}()
	p.run()
	return p.s, p.issues
}

func (p *parser) run() {
	data, ok := p.read()
	if !ok {
		return
	}
	front, frontLine, body, bodyLine, ok := p.split(data)
	if !ok {
		return
	}
	doc, ok := p.yaml(front, frontLine)
	if !ok {
		return
	}
	p.s = &Skill{Path: p.dir}
	meta := p.fields(doc, frontLine)
	p.checkName(frontLine)
	lines := bodyLines(body, bodyLine)
	p.s.Body = strings.TrimLeft(body, "\n")
	secs := sections(lines, 2)
	p.options(meta, secs)
	p.resources()
	p.installer(lines)
	p.exec(meta, secs)
}

// read returns SKILL.md's text: UTF-8, bounded, without a BOM, with LF line
// ends.
func (p *parser) read() (string, bool) {
	// The mode is checked before the open: opening a FIFO for reading
	// blocks until a writer comes (Load's file system also opens
	// O_NONBLOCK, for a file swapped in between the two).
	if fi, err := fs.Stat(p.fsys, p.rel(SkillFile)); err == nil && !fi.Mode().IsRegular() {
		p.add(sevFatal, 0, "", "not a regular file (%s)", fileKind(fi.Mode()))
		return "", false
	}
	f, err := p.fsys.Open(p.rel(SkillFile))
	if err != nil {
		p.add(sevFatal, 0, "", "cannot read: %v", pathless(err))
		return "", false
	}
	defer func() { _ = f.Close() }() // read only
	if fi, err := f.Stat(); err == nil {
		if !fi.Mode().IsRegular() {
			p.add(sevFatal, 0, "", "not a regular file (%s)", fileKind(fi.Mode()))
			return "", false
		}
		if fi.Size() > MaxSkillFile {
			p.add(sevFatal, 0, "", "%d bytes, above the limit of %d KiB", fi.Size(), MaxSkillFile>>10)
			return "", false
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillFile+1))
	if err != nil {
		p.add(sevFatal, 0, "", "cannot read: %v", pathless(err))
		return "", false
	}
	if len(data) > MaxSkillFile {
		p.add(sevFatal, 0, "", "more than %d KiB", MaxSkillFile>>10)
		return "", false
	}
	if !utf8.Valid(data) {
		p.add(sevFatal, 0, "", "not UTF-8 text")
		return "", false
	}
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if bytes.IndexByte(data, 0) >= 0 {
		p.add(sevFatal, 0, "", "contains a NUL byte: not a text file")
		return "", false
	}
	return strings.ReplaceAll(string(data), "\r\n", "\n"), true
}

// fileKind names a file's type for a message.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "type " + m.Type().String()
	}
}

// pathless drops the path from a *fs.PathError: the caller's message
// already names the file, and a host path need not reach a client.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// split cuts the front matter (between the first line "---" and the next)
// from the body. frontLine and bodyLine are the file's line numbers of
// their first lines.
func (p *parser) split(data string) (front string, frontLine int, body string, bodyLine int, ok bool) {
	first, rest, found := strings.Cut(data, "\n")
	if strings.TrimRight(first, " \t") != "---" {
		p.add(sevFatal, 1, "", "no front matter: the file must start with a line '---', then the YAML fields (name, description), then '---'")
		return "", 0, "", 0, false
	}
	if !found {
		rest = ""
	}
	lines := strings.Split(rest, "\n")
	for i, l := range lines {
		if strings.TrimRight(l, " \t") == "---" {
			front = strings.Join(lines[:i], "\n")
			if i+1 < len(lines) {
				body = strings.Join(lines[i+1:], "\n")
			}
			return front, 2, body, i + 3, true
		}
	}
	p.add(sevFatal, 1, "", "the front matter opened on line 1 is not closed by a line '---'")
	return "", 0, "", 0, false
}

// yamlLineRe finds the line number in a yaml error message.
var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlError returns a YAML error's message and its line in the file.
func yamlError(err error, frontLine int) (string, int) {
	msg := err.Error()
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return strings.TrimPrefix(msg, m[0]), n + frontLine - 1
	}
	// yaml.v3 leaves the line out when it is the first.
	return strings.TrimPrefix(msg, "yaml: "), frontLine
}

// yaml parses the front matter into its mapping node. Invalid YAML is
// retried once with the top-level values that contain ": " quoted, the
// commonest mistake in hand-written SKILL.md files (agentskills.io's client
// guide asks clients to forgive it).
func (p *parser) yaml(front string, frontLine int) (*yaml.Node, bool) {
	var doc yaml.Node
	err := yaml.Unmarshal([]byte(front), &doc)
	if err != nil {
		msg, line := yamlError(err, frontLine)
		quoted, keys := quoteColons(front)
		var again yaml.Node
		if len(keys) == 0 || yaml.Unmarshal([]byte(quoted), &again) != nil {
			p.add(sevFatal, line, "front matter", "not valid YAML: %s", msg)
			return nil, false
		}
		p.add(sevWarn, line, "front matter", "not valid YAML (%s); read with the value of %s quoted: quote values that contain ': '", msg, strings.Join(keys, ", "))
		doc = again
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode, Line: 1}, true // empty: the missing fields say the rest
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		p.add(sevFatal, m.Line+frontLine-1, "front matter", "not a mapping of fields (name: ..., description: ...)")
		return nil, false
	}
	return m, true
}

// plainKeyRe is a top-level "key: value" line whose value is a plain
// (unquoted, not block, not flow) scalar.
var plainKeyRe = regexp.MustCompile(`^([A-Za-z0-9_.-]+):[ \t]+([^ \t"'|>\[{&*!#%@` + "`" + `].*)$`)

// quoteColons quotes (single quotes) the plain top-level values that contain
// ": ", and says which keys it quoted.
func quoteColons(front string) (string, []string) {
	lines := strings.Split(front, "\n")
	var keys []string
	for i, l := range lines {
		m := plainKeyRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v := strings.TrimRight(m[2], " \t")
		if !strings.Contains(v, ": ") && !strings.HasSuffix(v, ":") {
			continue
		}
		lines[i] = m[1] + ": '" + strings.ReplaceAll(v, "'", "''") + "'"
		keys = append(keys, m[1])
	}
	return strings.Join(lines, "\n"), keys
}

// The front matter's fields.
const (
	fieldName          = "name"
	fieldDescription   = "description"
	fieldLicense       = "license"
	fieldCompatibility = "compatibility"
	fieldMetadata      = "metadata"
	fieldAllowedTools  = "allowed-tools"
	// OpenSage's, read at the top level and under metadata.
	fieldRunIn       = "should_run_in_sandbox"
	fieldReturnsJSON = "returns_json"
	// Claude's: implicit invocation off.
	fieldDisableModel = "disable-model-invocation"
)

// Keys under metadata that sandboxd reads, besides fieldRunIn and
// fieldReturnsJSON.
const (
	metaSandbox        = "sandboxd.sandbox" // same as should_run_in_sandbox
	metaReturnsJSON    = "sandboxd.returns_json"
	metaTimeout        = "sandboxd.timeout"
	metaInstallTimeout = "sandboxd.install_timeout"
	metaEntry          = "sandboxd.entry"
	metaPriority       = "sandboxd.priority"
)

// knownFields are the top-level fields Validate accepts: the Agent Skills
// specification's, and those of the formats sandboxd reads.
var knownFields = []string{
	fieldName, fieldDescription, fieldLicense, fieldCompatibility, fieldMetadata, fieldAllowedTools,
	fieldRunIn, fieldReturnsJSON, fieldDisableModel,
}

// metaValue is one metadata entry and where it was.
type metaValue struct {
	value string
	line  int
}

// Length limits of the Agent Skills specification.
const (
	maxNameLen          = 64
	maxDescriptionLen   = 1024
	maxCompatibilityLen = 500
)

// fields reads the front matter's mapping into the skill; it returns the
// metadata entries with their lines.
func (p *parser) fields(m *yaml.Node, frontLine int) map[string]metaValue {
	s := p.s
	line := func(n *yaml.Node) int { return n.Line + frontLine - 1 }
	seen := map[string]int{}
	meta := map[string]metaValue{}
	var hasName, hasDescription bool
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.add(sevWarn, line(k), "front matter", "a key that is not a plain name is ignored")
			continue
		}
		key := k.Value
		if first, dup := seen[key]; dup {
			p.add(sevWarn, line(k), key, "defined again (first on line %d); the last one is used", first)
		}
		seen[key] = line(k)
		switch key {
		case fieldName:
			s.Name, hasName = p.str(key, v, line(v)), true
		case fieldDescription:
			hasDescription = true
			if v.Kind != yaml.ScalarNode {
				p.add(sevFatal, line(v), key, "not a string")
				s.Description = ""
				continue
			}
			s.Description = p.str(key, v, line(v))
			if strings.TrimSpace(s.Description) == "" {
				p.add(sevFatal, line(v), key, "empty: say what the skill does and when to use it")
			}
		case fieldLicense:
			s.License = p.str(key, v, line(v))
		case fieldCompatibility:
			s.Compatibility = p.str(key, v, line(v))
			if n := utf8.RuneCountInString(s.Compatibility); n == 0 || n > maxCompatibilityLen {
				p.add(sevWarn, line(v), key, "%d characters: must be 1 to %d", n, maxCompatibilityLen)
			}
		case fieldAllowedTools:
			s.AllowedTools = p.allowedTools(v, line(v))
		case fieldMetadata:
			p.metadata(v, line, meta)
		case fieldRunIn:
			s.RunIn = p.str(key, v, line(v))
		case fieldReturnsJSON:
			if b, ok := p.boolean(key, v, line(v)); ok {
				s.ReturnsJSON = b
			}
		case fieldDisableModel:
			if b, ok := p.boolean(key, v, line(v)); ok {
				s.Hidden = b
			}
		case "sandbox", "sandboxes":
			p.add(sevWarn, line(k), key, "ignored: OpenSage deprecated it for %s", fieldRunIn)
		default:
			p.add(sevWarn, line(k), key, "unknown field, ignored (the fields are %s; others belong under metadata)", strings.Join(knownFields, ", "))
		}
	}
	if !hasName || strings.TrimSpace(s.Name) == "" {
		if p.folder != "." && p.folder != "" {
			p.add(sevWarn, frontLine, fieldName, "missing; the folder's name %q is used", p.folder)
			s.Name = p.folder
		} else {
			p.add(sevFatal, frontLine, fieldName, "missing")
		}
	}
	if !hasDescription {
		p.add(sevFatal, frontLine, fieldDescription, "missing: say what the skill does and when to use it")
	} else if n := utf8.RuneCountInString(s.Description); n > maxDescriptionLen {
		p.add(sevWarn, seen[fieldDescription], fieldDescription, "%d characters, above the limit of %d", n, maxDescriptionLen)
	}
	if len(meta) > 0 {
		s.Metadata = make(map[string]string, len(meta))
		for k, v := range meta {
			s.Metadata[k] = v.value
		}
	}
	return meta
}

// str returns a scalar's text; a value that is not a string is read as
// its text with a strict-only issue (YAML turned "version: 1.0" into a
// number, which the specification does not allow), a non-scalar is ignored.
func (p *parser) str(key string, v *yaml.Node, line int) string {
	if v.Kind != yaml.ScalarNode {
		p.add(sevWarn, line, key, "not a string, ignored")
		return ""
	}
	if v.Tag != "!!str" && v.Tag != "" {
		p.add(sevStrict, line, key, "%q is a YAML %s, not a string: quote it", v.Value, strings.TrimPrefix(v.Tag, "!!"))
	}
	return v.Value
}

// boolean reads a YAML boolean; the strings "true" and "false" are
// accepted with a strict-only issue.
func (p *parser) boolean(key string, v *yaml.Node, line int) (bool, bool) {
	if v.Kind == yaml.ScalarNode {
		b, err := strconv.ParseBool(strings.ToLower(v.Value))
		if err == nil && (v.Tag == "!!bool" || v.Value == "true" || v.Value == "false") {
			if v.Tag != "!!bool" {
				p.add(sevStrict, line, key, "%q is a string: write true or false without quotes", v.Value)
			}
			return b, true
		}
	}
	p.add(sevWarn, line, key, "not true or false, ignored")
	return false, false
}

// allowedTools reads allowed-tools: a space-separated string in the
// specification; Claude Code also takes a list, which is joined with spaces.
func (p *parser) allowedTools(v *yaml.Node, line int) string {
	if v.Kind == yaml.SequenceNode {
		var parts []string
		for _, e := range v.Content {
			if e.Kind == yaml.ScalarNode {
				parts = append(parts, e.Value)
			}
		}
		p.add(sevStrict, line, fieldAllowedTools, "a list: the specification wants one space-separated string")
		return strings.Join(parts, " ")
	}
	return p.str(fieldAllowedTools, v, line)
}

// metadata reads the metadata mapping (string to string).
func (p *parser) metadata(v *yaml.Node, line func(*yaml.Node) int, meta map[string]metaValue) {
	if v.Kind != yaml.MappingNode {
		if v.Kind != yaml.ScalarNode || v.Tag != "!!null" {
			p.add(sevWarn, line(v), fieldMetadata, "not a mapping, ignored")
		}
		return
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.add(sevWarn, line(k), fieldMetadata, "a key that is not a plain name is ignored")
			continue
		}
		field := fieldMetadata + "." + k.Value
		if val.Kind != yaml.ScalarNode {
			p.add(sevWarn, line(val), field, "not a string, ignored")
			continue
		}
		if _, dup := meta[k.Value]; dup {
			p.add(sevWarn, line(k), field, "defined again; the last one is used")
		}
		meta[k.Value] = metaValue{value: p.str(field, val, line(val)), line: line(val)}
	}
}

// nameRe is a valid name: lowercase letters, digits and single hyphens
// between them.
var nameRe = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

func (p *parser) checkName(frontLine int) {
	name := p.s.Name
	if name == "" {
		return
	}
	if n := utf8.RuneCountInString(name); n > maxNameLen {
		p.add(sevWarn, frontLine, fieldName, "%d characters, above the limit of %d", n, maxNameLen)
	}
	if !nameRe.MatchString(name) {
		p.add(sevWarn, frontLine, fieldName, "%q: use lowercase letters, digits and single hyphens, not at either end", name)
	}
	if p.folder != "." && p.folder != "" && name != p.folder {
		p.add(sevWarn, frontLine, fieldName, "%q differs from the folder's name %q", name, p.folder)
	}
}

// options reads what sandboxd takes from metadata and the body's
// sections: where it runs, returns_json, timeouts, priority.
func (p *parser) options(meta map[string]metaValue, secs []section) {
	s := p.s
	for _, k := range []string{fieldRunIn, metaSandbox} {
		if mv, ok := meta[k]; ok {
			if s.RunIn != "" && s.RunIn != mv.value {
				p.add(sevWarn, mv.line, fieldMetadata+"."+k, "%q differs from %q given before; the first is used", mv.value, s.RunIn)
				continue
			}
			s.RunIn = mv.value
		}
	}
	if s.RunIn != "" && !kindRe.MatchString(s.RunIn) {
		p.add(sevWarn, 0, fieldRunIn, "%q is not a sandbox kind (letters, digits, '.', '_', '-'), ignored", s.RunIn)
		s.RunIn = ""
	}
	for _, k := range []string{fieldReturnsJSON, metaReturnsJSON} {
		if mv, ok := meta[k]; ok {
			b, err := strconv.ParseBool(mv.value)
			if err != nil {
				p.add(sevWarn, mv.line, fieldMetadata+"."+k, "%q is not true or false, ignored", mv.value)
				continue
			}
			s.ReturnsJSON = s.ReturnsJSON || b
		}
	}
	if mv, ok := meta[metaTimeout]; ok {
		if d, err := parseTimeout(mv.value); err != nil {
			p.add(sevWarn, mv.line, fieldMetadata+"."+metaTimeout, "%v", err)
		} else {
			s.Timeout = d
		}
	}
	if mv, ok := meta[metaInstallTimeout]; ok {
		if d, err := parseTimeout(mv.value); err != nil {
			p.add(sevWarn, mv.line, fieldMetadata+"."+metaInstallTimeout, "%v", err)
		} else {
			s.InstallTimeout = d
		}
	}
	if mv, ok := meta[metaPriority]; ok {
		if n, err := parsePriority(mv.value); err != nil {
			p.add(sevWarn, mv.line, fieldMetadata+"."+metaPriority, "%v", err)
		} else {
			s.Priority = n
		}
	}
	for _, name := range []string{"Timeout", "Priority", "Parameters", "Usage"} {
		if sec, n := findSection(secs, name); n > 1 {
			p.add(sevStrict, sec.n, "## "+name, "%d sections of that name; the first is read", n)
		}
	}
	if sec, _ := findSection(secs, "Timeout"); sec != nil {
		text, n := firstText(sec.lines)
		d, err := parseTimeout(text)
		switch {
		case err != nil:
			p.add(sevWarn, max(n, sec.n), "## Timeout", "%v; the default %s applies", err, DefaultTimeout)
		case s.Timeout != 0 && s.Timeout != d:
			p.add(sevWarn, n, "## Timeout", "%s differs from metadata %s %s, which is used", d, metaTimeout, s.Timeout)
		default:
			s.Timeout = d
		}
	}
	if sec, _ := findSection(secs, "Priority"); sec != nil {
		text, n := firstText(sec.lines)
		v, err := parsePriority(text)
		switch {
		case err != nil:
			p.add(sevWarn, max(n, sec.n), "## Priority", "%v", err)
		case s.Priority != 0 && s.Priority != v:
			p.add(sevWarn, n, "## Priority", "%d differs from metadata %s %d, which is used", v, metaPriority, s.Priority)
		default:
			s.Priority = v
		}
	}
}

// kindRe is a sandbox kind, used as a folder name under deps/.
var kindRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// timeoutRe reads "200", "200 seconds", "1.5 minutes", "90s", "5m".
var timeoutRe = regexp.MustCompile(`^(\d+(?:\.\d+)?)\s*([a-z]*)`)

// parseTimeout reads a timeout as OpenSage's skills write it ("200
// seconds", "Default timeout: 60 seconds") or as a Go duration ("5m",
// "1m30s"); a bare number is seconds.
func parseTimeout(text string) (time.Duration, error) {
	t := strings.ToLower(strings.TrimSpace(strings.NewReplacer("*", "", "`", "", "_", " ").Replace(text)))
	if i := strings.LastIndexByte(t, ':'); i >= 0 {
		t = strings.TrimSpace(t[i+1:])
	}
	if t == "" {
		return 0, errors.New("no timeout given: write e.g. \"200 seconds\" or \"5m\"")
	}
	d, err := time.ParseDuration(strings.ReplaceAll(t, " ", ""))
	if err != nil {
		m := timeoutRe.FindStringSubmatch(t)
		if m == nil {
			return 0, fmt.Errorf("%q is not a timeout: write e.g. \"200 seconds\" or \"5m\"", clip(text, 80))
		}
		n, err := strconv.ParseFloat(m[1], 64)
		if err != nil || n > MaxTimeout.Seconds()*1000 {
			return 0, fmt.Errorf("%q is not a timeout: write e.g. \"200 seconds\" or \"5m\"", clip(text, 80))
		}
		var unit time.Duration
		switch m[2] {
		case "", "s", "sec", "secs", "second", "seconds":
			unit = time.Second
		case "ms", "millisecond", "milliseconds":
			unit = time.Millisecond
		case "m", "min", "mins", "minute", "minutes":
			unit = time.Minute
		case "h", "hr", "hrs", "hour", "hours":
			unit = time.Hour
		default:
			return 0, fmt.Errorf("%q: unknown unit %q (seconds, minutes, hours)", clip(text, 80), m[2])
		}
		d = time.Duration(n * float64(unit))
	}
	if d <= 0 || d > MaxTimeout {
		return 0, fmt.Errorf("%q: a timeout must be above 0 and at most %s", clip(text, 80), MaxTimeout)
	}
	return d, nil
}

// priorityRe reads the integer that starts a ## Priority section.
var priorityRe = regexp.MustCompile(`^[+-]?\d+`)

// maxPriority bounds ## Priority.
const maxPriority = 1_000_000

func parsePriority(text string) (int, error) {
	t := strings.TrimSpace(strings.NewReplacer("*", "", "`", "").Replace(text))
	m := priorityRe.FindString(t)
	if m == "" {
		return 0, fmt.Errorf("%q is not an integer", clip(text, 80))
	}
	n, err := strconv.Atoi(m)
	if err != nil || n < -maxPriority || n > maxPriority {
		return 0, fmt.Errorf("%q: a priority is an integer from %d to %d", clip(text, 80), -maxPriority, maxPriority)
	}
	return n, nil
}

// clip shortens s for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// skipDir reports whether a folder is never looked into: version control
// and package trees.
func skipDir(name string) bool { return name == ".git" || name == "node_modules" }

// maxResourceScan bounds the files looked at while listing a skill's
// resources.
const maxResourceScan = 10 * MaxResources

// resources lists the folder's files: everything but SKILL.md, not
// descending into folders that are skills of their own, bounded.
func (p *parser) resources() {
	var files []string
	more, dirs := false, 0
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		if more {
			return
		}
		dirs++
		if dirs > MaxDirs {
			more = true
			return
		}
		entries, err := fs.ReadDir(p.fsys, p.rel(rel))
		if err != nil {
			return
		}
		for _, e := range entries {
			name := path.Join(rel, e.Name())
			switch {
			case e.IsDir():
				if skipDir(e.Name()) || depth >= MaxDepth {
					continue
				}
				if fi, err := fs.Stat(p.fsys, p.rel(path.Join(name, SkillFile))); err == nil && !fi.IsDir() {
					continue // a skill of its own
				}
				walk(name, depth+1)
			case e.Type().IsRegular():
				if name == SkillFile {
					continue
				}
				if len(files) == maxResourceScan {
					more = true
					return
				}
				files = append(files, name)
			}
			if more {
				return
			}
		}
	}
	walk(".", 0)
	sort.Strings(files)
	if len(files) > MaxResources || more {
		n := fmt.Sprint(len(files))
		if more {
			n = "more than " + n
		}
		p.add(sevWarn, 0, "resources", "%s files; only the first %d are listed", n, MaxResources)
		files = files[:min(len(files), MaxResources)]
	}
	p.s.Resources = files
}

// depsRefRe finds installer paths the body mentions.
var depsRefRe = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])(deps/(?:[A-Za-z0-9._-]+/)?install\.sh)`)

// installer picks deps/<RunIn>/install.sh, else deps/install.sh, and checks
// the installers the body mentions exist.
func (p *parser) installer(lines []mdLine) {
	s := p.s
	if s.RunIn != "" && p.isFile("deps/"+s.RunIn+"/install.sh") {
		s.Installer = "deps/" + s.RunIn + "/install.sh"
	} else if p.isFile("deps/install.sh") {
		s.Installer = "deps/install.sh"
	}
	if s.Installer == "" {
		for _, r := range s.Resources {
			if kind, ok := strings.CutPrefix(r, "deps/"); ok && strings.HasSuffix(kind, "/install.sh") && strings.Count(kind, "/") == 1 {
				p.add(sevWarn, 0, "installer", "%s is not used: %s is %q", r, fieldRunIn, s.RunIn)
			}
		}
	}
	seen := map[string]bool{}
	for _, l := range lines {
		if !strings.Contains(l.text, "deps/") {
			continue // the regexp is the slow part of a whole parse
		}
		for _, m := range depsRefRe.FindAllStringSubmatch(l.text, -1) {
			if ref := m[1]; !seen[ref] {
				seen[ref] = true
				if !p.isFile(ref) {
					p.add(sevWarn, l.n, "installer", "%s is mentioned but not in the folder", ref)
				}
			}
		}
	}
}

// scriptRefRe finds scripts/<file> in a usage example.
var scriptRefRe = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.-])scripts/([A-Za-z0-9_.-]+)`)

// exec makes the skill executable when it has a script and says how to call
// it: ## Parameters, or metadata sandboxd.entry.
func (p *parser) exec(meta map[string]metaValue, secs []section) {
	params, hasParams := findSection(secs, "Parameters")
	var scripts []string
	for _, r := range p.s.Resources {
		if name, ok := strings.CutPrefix(r, "scripts/"); ok && !strings.Contains(name, "/") {
			scripts = append(scripts, r)
		}
	}
	entry := ""
	switch mv, ok := meta[metaEntry]; {
	case ok:
		field := fieldMetadata + "." + metaEntry
		if !fs.ValidPath(mv.value) || mv.value == "." || mv.value == SkillFile {
			p.add(sevWarn, mv.line, field, "%q is not a file path relative to the skill's folder: not executable", mv.value)
			return
		}
		if !p.isFile(mv.value) {
			p.add(sevWarn, mv.line, field, "%s is not a file in the skill's folder: not executable", mv.value)
			return
		}
		entry = mv.value
	case hasParams > 0 && len(scripts) == 0:
		p.add(sevWarn, params.n, "## Parameters", "no script under scripts/ (nor metadata %s): not executable", metaEntry)
		return
	case hasParams == 0 || len(scripts) == 0:
		return // instructions only
	default:
		entry = p.usageEntry(secs, scripts)
		if entry == "" {
			if len(scripts) > 1 {
				p.add(sevWarn, params.n, "## Parameters", "%d scripts under scripts/ and ## Usage names none of them: set metadata %s; not executable", len(scripts), metaEntry)
				return
			}
			entry = scripts[0]
		}
	}
	x := &Exec{Entry: entry}
	if params != nil {
		ps, ok := p.params(params)
		if !ok {
			return
		}
		x.Params = ps
	}
	p.s.Exec = x
}

// usageEntry returns the first of the scripts the first code block of
// ## Usage calls.
func (p *parser) usageEntry(secs []section, scripts []string) string {
	usage, _ := findSection(secs, "Usage")
	if usage == nil {
		return ""
	}
	code, _, ok := firstCodeBlock(usage.lines)
	if !ok {
		return ""
	}
	for _, m := range scriptRefRe.FindAllStringSubmatch(code, -1) {
		for _, s := range scripts {
			if s == "scripts/"+m[1] {
				return s
			}
		}
	}
	return ""
}
