// Package config reads the configuration file of `sandboxd serve --config`:
// named session profiles, the operator's skill roots and the engine
// networks sessions may join.
//
// The file is YAML, decoded through yaml.Node rather than into structs, so
// that every error names the file, line and column, and the option's path
// (profiles.fuzz.limits.memory); a key this package does not know is an
// error, anywhere. Parse checks the file's shape and each value's syntax;
// Check resolves every profile with the server's defaults, as a session
// create would, and reports what sandbox.SessionOptions.Validate finds at
// the line of the option at fault.
//
// A profile's session fields map one to one onto sandbox.SessionOptions
// (sessionFields): a new session option needs one line there.
package config

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/sandbox"
)

// DefaultProfile is the profile of a session.create that names none and of
// the MCP endpoint /mcp, when the file defines it.
const DefaultProfile = "default"

// Bounds of the file.
const (
	// MaxFileBytes bounds the file read (a config is a few KiB).
	MaxFileBytes = 1 << 20
	// MaxPool bounds a profile's warm pool (a typo guard: each is a
	// started container).
	MaxPool = 1000
	// maxNodes bounds the nodes walked, aliases followed included, so a
	// file of nested aliases cannot make the walk explode.
	maxNodes = 100_000
	// maxErrors is how many problems one load reports.
	maxErrors = 20
)

// ProfileNameRe is what a profile's name must match: it appears in URLs
// (/mcp/NAME) and on the command line.
var ProfileNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// File is a parsed configuration file.
type File struct {
	// Path is the file's name as given (it prefixes every error).
	Path string
	// Profiles by name.
	Profiles map[string]*Profile
	// SkillsDirs are the operator's skill roots: absolute paths of
	// existing directories on the daemon's host, in the file's order.
	SkillsDirs []string
	// AllowNetworks are the engine networks, by exact name, that sessions
	// may join besides none, bridge and internal
	// (sandbox.ManagerOptions.Networks): `allow_networks`, to which
	// `serve --allow-network` adds. sandboxd does not firewall them.
	AllowNetworks []string
}

// Profile is one named kind of session.
type Profile struct {
	Name string
	// Options are the profile's session options as written: fields left
	// out are zero and take the server's defaults (the serve flags) when a
	// session is created.
	Options sandbox.SessionOptions
	// Pool is how many sandboxes of the profile's resolved options to keep
	// started at least (a warm pool); 0: none. `pool: N` is a fixed pool;
	// `pool: {min: N, max: M}` one that grows with demand up to PoolMax
	// and shrinks back to Pool after PoolIdle (sandbox.PoolOptions).
	Pool int
	// PoolMax is the pool's max when it follows demand; 0: fixed at Pool.
	PoolMax int
	// PoolIdle is `pool.idle`; 0: sandbox.DefaultPoolIdle.
	PoolIdle time.Duration
	// PoolShared is `pool.shared`: the pool hands its sandboxes to any
	// create whose resolved options are the same, whatever profile it
	// names (sandbox.PoolOptions.Shared). By default a pool serves only
	// its own profile's creates.
	PoolShared bool
	// TransferTools is `transfer_tools`: the profile's MCP endpoint
	// serves the harness's upload and download tools (tools/transfer),
	// which move files in and out whole and byte-exact. Off by default:
	// they are for a harness, not for the model (docs/harness.md).
	TransferTools bool
	// SnapshotTools is `snapshot_tools`: the profile's MCP endpoint serves
	// the harness's snapshot, fork, restore and snapshot_list tools
	// (docs/snapshots.md). Off by default: for a harness, not the model.
	SnapshotTools bool
	// SnapshotRetention is `snapshot_retention`: how long a snapshot of
	// the profile's sessions is kept unless its request says; 0: the
	// server's (--snapshot-retention).
	SnapshotRetention time.Duration

	// pos is where each option was written: "" is the profile's name,
	// "image", "limits", "limits.memory", ...
	pos map[string]position
}

type position struct{ line, col int }

// Error is one problem of a configuration file, at a place in it.
type Error struct {
	File      string
	Line, Col int    // 0: unknown
	Path      string // the option: profiles.fuzz.limits.memory ("" for the file as a whole)
	Msg       string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads and parses the file at path (see Parse).
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, &Error{File: path, Msg: fmt.Sprintf("larger than %d KiB", MaxFileBytes>>10)}
	}
	return Parse(path, data)
}

// Parse parses a configuration file's content; name is the file's name in
// errors. Every problem found is reported (up to a bound), each as an
// *Error, joined.
func Parse(name string, data []byte) (*File, error) {
	cfg := &File{Path: name, Profiles: map[string]*Profile{}}
	p := &parser{file: name}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, p.syntax(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: name, Line: extra.Line, Col: extra.Column, Msg: "a second YAML document: the file holds one"}
	} else if !errors.Is(err, io.EOF) {
		return nil, p.syntax(err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return cfg, nil // an empty file: no profiles
	}
	root := doc.Content[0]
	p.mapping(root, "", func(key string, k, v *yaml.Node) {
		switch key {
		case "profiles":
			p.profiles(cfg, v)
		case "skills_dirs":
			cfg.SkillsDirs = p.skillsDirs(v, key)
		case "allow_networks":
			cfg.AllowNetworks = p.networks(v, key)
		default:
			p.unknown(k, "", key, "profiles", "skills_dirs", "allow_networks")
		}
	})
	if err := p.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Names are the profiles' names, sorted.
func (f *File) Names() []string { return slices.Sorted(maps.Keys(f.Profiles)) }

// Check resolves every profile over the server's defaults (the options the
// serve flags give every session) and reports, at the line of the option
// at fault, every problem sandbox.SessionOptions.Validate finds, and a
// network that AllowNetworks does not list.
func (f *File) Check(defaults sandbox.SessionOptions) error {
	var errs []error
	for _, name := range f.Names() {
		p := f.Profiles[name]
		r, err := p.Options.Resolve(defaults)
		if err == nil {
			err = r.CheckNetworkAllowed(f.AllowNetworks)
		}
		if err == nil {
			continue
		}
		var oe *sandbox.OptionsError
		if !errors.As(err, &oe) || len(oe.Details) == 0 {
			errs = append(errs, f.Errorf(name, "", "%v", err))
			continue
		}
		for _, d := range oe.Details {
			text := d.String()
			msg := strings.TrimPrefix(text, string(d.Field)+": ")
			if _, written := p.pos[string(d.Field)]; !written && d.Field != "limits" {
				// The server's defaults (the serve flags) gave it.
				msg += " (the server's default: the profile does not set it)"
			}
			errs = append(errs, f.Errorf(name, string(d.Field), "%s", msg))
		}
	}
	return errors.Join(errs...)
}

// Errorf makes an error about a profile's option (field as
// sandbox.Field names it: "limits.memory"; "" for the profile itself), at
// the line where the profile writes it, else at its nearest written parent.
func (f *File) Errorf(profile, field, format string, args ...any) error {
	e := &Error{File: f.Path, Path: "profiles." + profile, Msg: fmt.Sprintf(format, args...)}
	if field != "" {
		e.Path += "." + field
	}
	if p := f.Profiles[profile]; p != nil {
		for k := field; ; {
			if pos, ok := p.pos[k]; ok {
				e.Line, e.Col = pos.line, pos.col
				break
			}
			if k == "" {
				break
			}
			i := strings.LastIndexByte(k, '.')
			k = k[:max(i, 0)]
		}
	}
	return e
}

// Lookup returns a profile; an unknown name is an error listing the
// defined ones.
func (f *File) Lookup(name string) (*Profile, error) {
	if p, ok := f.Profiles[name]; ok {
		return p, nil
	}
	return nil, UnknownProfile(name, f.Names())
}

// UnknownProfile is the error of a profile name that is not defined.
func UnknownProfile(name string, defined []string) error {
	if len(defined) == 0 {
		return fmt.Errorf("unknown profile %q: this server defines no profiles", name)
	}
	return fmt.Errorf("unknown profile %q (defined: %s)", name, strings.Join(defined, ", "))
}

// parser walks the document, collecting errors.
type parser struct {
	file  string
	errs  []error
	nodes int
}

var yamlLineRe = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

// syntax turns the YAML library's error into one at the file's line.
func (p *parser) syntax(err error) error {
	msg := err.Error()
	e := &Error{File: p.file}
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	e.Msg = "not valid YAML: " + msg
	return e
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	if len(p.errs) == maxErrors {
		p.errs = append(p.errs, &Error{File: p.file, Msg: "more problems not shown"})
	}
	if len(p.errs) > maxErrors {
		return
	}
	e := &Error{File: p.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Col = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *parser) err() error { return errors.Join(p.errs...) }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// resolve follows aliases, counting the nodes walked.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	p.nodes++
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "not a value"
}

// mapping calls f for each key of a mapping node, in order, with merge
// keys (<<: *anchor) expanded: keys written in the mapping win over merged
// ones. A null node is an empty mapping. Duplicate keys are errors.
func (p *parser) mapping(n *yaml.Node, path string, f func(key string, k, v *yaml.Node)) {
	n = p.resolve(n)
	if n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null") {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping of keys to values, not %s", kindName(n))
		return
	}
	type pair struct{ k, v *yaml.Node }
	var own, merged []pair
	seen := map[string]bool{}
	var collect func(m *yaml.Node, into *[]pair, depth int)
	collect = func(m *yaml.Node, into *[]pair, depth int) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if p.nodes > maxNodes {
				p.errorf(m, path, "too many nodes (more than %d, aliases counted)", maxNodes)
				return
			}
			k, v := p.resolve(m.Content[i]), m.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				if depth > 8 {
					p.errorf(k, path, "merge keys nested too deep")
					continue
				}
				src := p.resolve(v)
				srcs := []*yaml.Node{src}
				if src.Kind == yaml.SequenceNode {
					srcs = src.Content
				}
				for _, s := range srcs {
					if s = p.resolve(s); s.Kind != yaml.MappingNode {
						p.errorf(s, path, "a merge key (<<) takes a mapping or a list of mappings, not %s", kindName(s))
						continue
					}
					collect(s, &merged, depth+1)
				}
				continue
			}
			*into = append(*into, pair{k, v})
		}
	}
	collect(n, &own, 0)
	for _, pr := range own {
		if pr.k.Kind != yaml.ScalarNode || pr.k.ShortTag() == "!!null" {
			p.errorf(pr.k, path, "a key must be a name, not %s", kindName(pr.k))
			continue
		}
		if seen[pr.k.Value] {
			p.errorf(pr.k, join(path, pr.k.Value), "given twice")
			continue
		}
		seen[pr.k.Value] = true
		f(pr.k.Value, pr.k, pr.v)
	}
	for _, pr := range merged {
		if pr.k.Kind != yaml.ScalarNode || seen[pr.k.Value] {
			continue // written in the mapping itself, or merged before
		}
		seen[pr.k.Value] = true
		f(pr.k.Value, pr.k, pr.v)
	}
}

// unknown reports a key nobody reads, with the keys that would be.
func (p *parser) unknown(k *yaml.Node, path, key string, known ...string) {
	slices.Sort(known)
	p.errorf(k, join(path, key), "unknown key (known here: %s)", strings.Join(known, ", "))
}

func (p *parser) profiles(cfg *File, n *yaml.Node) {
	p.mapping(n, "profiles", func(name string, k, v *yaml.Node) {
		path := "profiles." + name
		if !ProfileNameRe.MatchString(name) {
			p.errorf(k, path, "%q is not a profile name (lower-case letters, digits, '_' and '-', starting with a letter or digit, at most 63)", name)
			return
		}
		prof := &Profile{Name: name, pos: map[string]position{"": {k.Line, k.Column}}}
		p.profile(prof, v, path)
		cfg.Profiles[name] = prof
	})
}

// profileKeys are the keys of a profile that are not session options.
var profileKeys = []string{"pool", "transfer_tools", "snapshot_tools", "snapshot_retention"}

func (p *parser) profile(prof *Profile, n *yaml.Node, path string) {
	fields := sessionFields(&prof.Options)
	p.mapping(n, path, func(key string, k, v *yaml.Node) {
		prof.pos[key] = position{k.Line, k.Column}
		kpath := join(path, key)
		if dec, ok := fields[key]; ok {
			dec(p, v, kpath, prof.pos, key)
			return
		}
		switch key {
		case "pool":
			p.pool(prof, v, kpath)
		case "transfer_tools":
			boolean(&prof.TransferTools)(p, v, kpath, nil, key)
		case "snapshot_tools":
			boolean(&prof.SnapshotTools)(p, v, kpath, nil, key)
		case "snapshot_retention":
			duration(&prof.SnapshotRetention)(p, v, kpath, nil, key)
		default:
			p.unknown(k, path, key, append(slices.Collect(maps.Keys(fields)), profileKeys...)...)
		}
	})
}

// pool reads `pool: N` (a fixed pool) or `pool: {min: N, max: M, idle: D,
// shared: B}`.
func (p *parser) pool(prof *Profile, v *yaml.Node, path string) {
	size := func(v *yaml.Node, path string) int {
		n, ok := p.integer(v, path)
		if ok && (n < 0 || n > MaxPool) {
			p.errorf(p.resolve(v), path, "%d: want 0 (no warm pool) to %d", n, MaxPool)
			ok = false
		}
		if !ok {
			return 0
		}
		return int(n)
	}
	if n := p.resolve(v); n == nil || n.Kind != yaml.MappingNode {
		prof.Pool = size(v, path)
		return
	}
	var hasMin, hasMax bool
	p.mapping(v, path, func(key string, k, v *yaml.Node) {
		kpath := join(path, key)
		switch key {
		case "min":
			prof.Pool, hasMin = size(v, kpath), true
		case "max":
			prof.PoolMax, hasMax = size(v, kpath), true
		case "idle":
			duration(&prof.PoolIdle)(p, v, kpath, nil, key)
		case "shared":
			boolean(&prof.PoolShared)(p, v, kpath, nil, key)
		default:
			p.unknown(k, path, key, "min", "max", "idle", "shared")
		}
	})
	switch {
	case !hasMin || !hasMax:
		p.errorf(p.resolve(v), path, "want both min and max (or pool: N for a fixed pool of N)")
	case prof.PoolMax < prof.Pool:
		p.errorf(p.resolve(v), path, "max %d is below min %d", prof.PoolMax, prof.Pool)
	}
}

func (p *parser) skillsDirs(n *yaml.Node, path string) []string {
	var dirs []string
	p.list(n, path, func(i int, v *yaml.Node) {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		d, ok := p.str(v, ipath)
		if !ok {
			return
		}
		if err := CheckSkillsDir(d); err != nil {
			p.errorf(v, ipath, "%v", err)
		} else if slices.Contains(dirs, d) {
			p.errorf(v, ipath, "%q is listed twice", d)
		} else {
			dirs = append(dirs, d)
		}
	})
	return dirs
}

// networks reads allow_networks: names of engine networks, each as
// sandbox.CheckNetworkName accepts it, none twice.
func (p *parser) networks(n *yaml.Node, path string) []string {
	var names []string
	p.list(n, path, func(i int, v *yaml.Node) {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		name, ok := p.str(v, ipath)
		if !ok {
			return
		}
		if err := sandbox.CheckNetworkName(name); err != nil {
			p.errorf(v, ipath, "%v", err)
		} else if slices.Contains(names, name) {
			p.errorf(v, ipath, "%q is listed twice", name)
		} else {
			names = append(names, name)
		}
	})
	return names
}

// CheckSkillsDir checks a skill root: the absolute, clean path of an
// existing directory.
func CheckSkillsDir(d string) error {
	switch st, err := os.Stat(d); {
	case !filepath.IsAbs(d):
		return fmt.Errorf("%q is not an absolute path", d)
	case filepath.Clean(d) != d:
		return fmt.Errorf("%q is not a clean path (did you mean %q?)", d, filepath.Clean(d))
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%q is not a directory", d)
	}
	return nil
}

// list calls f for each item of a sequence node (null: none).
func (p *parser) list(n *yaml.Node, path string, f func(i int, v *yaml.Node)) bool {
	n = p.resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list, not %s", kindName(n))
		return false
	}
	for i, v := range n.Content {
		if p.nodes > maxNodes {
			p.errorf(v, path, "too many nodes (more than %d, aliases counted)", maxNodes)
			return false
		}
		f(i, v)
	}
	return true
}

// str reads a scalar as a string. Null (a key with no value) is an error:
// leave the key out to take the default.
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	n = p.resolve(n)
	switch {
	case n.Kind != yaml.ScalarNode:
		p.errorf(n, path, "want a single value, not %s", kindName(n))
		return "", false
	case n.ShortTag() == "!!null":
		p.errorf(n, path, "no value (leave the key out to take the server's default)")
		return "", false
	}
	return n.Value, true
}

func (p *parser) integer(n *yaml.Node, path string) (int64, bool) {
	n = p.resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errorf(n, path, "want a whole number, not %s", kindName(n))
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil {
		p.errorf(n, path, "%q is not a whole number in range", n.Value)
		return 0, false
	}
	return v, true
}
