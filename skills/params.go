package skills

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The ## Parameters section of an executable skill (OpenSage's format):
//
//	### fuzz_target (required, positional position 0)
//	**Type**: `str`
//	Fuzz target binary name.
//
//	### seed_paths (optional, positional position 2+)
//	**Type**: `list` of strings
//
//	### --custom_mutator_path (optional, named parameter)
//	**Type**: `str`
//
//	### --reset_output (optional, flag)
//	**Type**: `bool` (default: `false`)

var (
	// paramHeadRe is "name (...)", the name optionally in backticks and
	// with leading dashes.
	paramHeadRe  = regexp.MustCompile("^`?(-{0,2})([^\\s`()]+)`?\\s*\\((.*)\\)\\s*$")
	positionalRe = regexp.MustCompile(`^positional(?:\s+position)?(?:\s+(\d{1,3})(\+)?)?$`)
	// paramNameRe is a parameter name: it becomes a JSON Schema property
	// and a --option.
	paramNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)
	// typeTokenRe is the type's first word, in backticks or not.
	typeTokenRe = regexp.MustCompile("^`?([A-Za-z][A-Za-z0-9_\\[\\]]*)`?")
)

// paramTypes maps the types skills write to JSON Schema types.
var paramTypes = map[string]string{
	"str": "string", "string": "string", "path": "string",
	"int": "integer", "integer": "integer",
	"float": "number", "number": "number", "double": "number",
	"bool": "boolean", "boolean": "boolean",
	"list": "array", "array": "array", "list[str]": "array", "list[string]": "array",
}

// params reads ## Parameters. ok is false when a parameter cannot be read,
// which makes the skill not executable: a guessed argv is worse than none.
func (p *parser) params(sec *section) ([]Param, bool) {
	subs := sections(sec.lines, 3)
	if len(subs) > MaxParams {
		p.add(sevWarn, sec.n, "## Parameters", "%d parameters, above the limit of %d: not executable", len(subs), MaxParams)
		return nil, false
	}
	ok := true
	bad := func(line int, format string, args ...any) {
		p.add(sevWarn, line, "## Parameters", format+": not executable", args...)
		ok = false
	}
	var out []Param
	var lines []int        // the heading line of each of out
	auto := map[int]bool{} // indexes of positionals without a position
	for _, sub := range subs {
		m := paramHeadRe.FindStringSubmatch(sub.title)
		if m == nil {
			bad(sub.n, "### %q: write \"### name (required|optional, positional position N | positional position N+ | named parameter | flag)\"", clip(sub.title, 80))
			continue
		}
		dashes, name := m[1], m[2]
		if !paramNameRe.MatchString(name) {
			bad(sub.n, "### %q: a parameter name is letters, digits, '_' and '-' (at most 64)", clip(name, 80))
			continue
		}
		prm := Param{Name: name}
		var haveReq, haveKind, badPart bool
		for _, part := range strings.Split(m[3], ",") {
			t := strings.ToLower(strings.Join(strings.Fields(part), " "))
			switch pm := positionalRe.FindStringSubmatch(t); {
			case t == "required" || t == "optional":
				if haveReq {
					bad(sub.n, "### %s: required or optional, given twice", name)
				}
				haveReq, prm.Required = true, t == "required"
			case pm != nil, t == "named parameter", t == "named", t == "flag":
				if haveKind {
					bad(sub.n, "### %s: more than one kind (positional, named parameter, flag)", name)
				}
				haveKind = true
				switch {
				case pm != nil:
					prm.Kind = Positional
					if pm[1] == "" {
						auto[len(out)] = true
						p.add(sevStrict, sub.n, "## Parameters", "### %s: give the position (positional position N)", name)
					} else {
						prm.Position, _ = strconv.Atoi(pm[1])
						prm.Variadic = pm[2] == "+"
					}
				case t == "flag":
					prm.Kind = Flag
				default:
					prm.Kind = Named
				}
			default:
				badPart = true
				bad(sub.n, "### %s: %q is not required, optional, positional position N, named parameter or flag", name, clip(t, 40))
			}
		}
		if !haveReq && !badPart {
			p.add(sevStrict, sub.n, "## Parameters", "### %s: say required or optional (read as optional)", name)
		}
		if !haveKind && !badPart {
			p.add(sevStrict, sub.n, "## Parameters", "### %s: say positional position N, named parameter or flag", name)
			if dashes != "" {
				prm.Kind = Named
			} else {
				prm.Kind = Positional
				auto[len(out)] = true
			}
		}
		if prm.Kind == Positional && dashes != "" {
			bad(sub.n, "### %s%s: a positional parameter has no leading dashes", dashes, name)
		}
		if prm.Kind != Positional {
			prm.Option = "--" + name
		}
		p.paramBody(&prm, sub, bad)
		out = append(out, prm)
		lines = append(lines, sub.n)
	}
	if !p.checkParams(out, lines, auto, bad) {
		return nil, false
	}
	return out, ok
}

// paramBody reads a parameter's **Type** line and description.
func (p *parser) paramBody(prm *Param, sub section, bad func(int, string, ...any)) {
	var desc []string
	typeText, typeLine := "", 0
	for _, l := range sub.lines {
		t := strings.TrimSpace(l.text)
		if typeLine == 0 && !l.code {
			plain := strings.TrimSpace(strings.ReplaceAll(t, "*", ""))
			if rest, ok := cutPrefixFold(plain, "type:"); ok {
				typeText, typeLine = strings.TrimSpace(rest), l.n
				continue
			}
		}
		desc = append(desc, t)
	}
	prm.Description = joinParagraphs(desc)
	switch {
	case typeLine == 0 && prm.Kind == Flag:
		prm.Type = "boolean"
	case typeLine == 0:
		p.add(sevStrict, sub.n, "## Parameters", "### %s: no **Type** line (read as %s)", prm.Name, map[bool]string{true: "a list", false: "a string"}[prm.Variadic])
		prm.Type = "string"
	default:
		m := typeTokenRe.FindStringSubmatch(typeText)
		word := ""
		if m != nil {
			word = strings.ToLower(m[1])
		}
		typ, known := paramTypes[word]
		if !known {
			p.add(sevWarn, typeLine, "## Parameters", "### %s: unknown type %q, read as a string (str, int, float, bool, list)", prm.Name, clip(typeText, 40))
			typ = "string"
		}
		prm.Type = typ
		if m != nil {
			if rest := strings.TrimSpace(strings.ReplaceAll(typeText[len(m[0]):], "`", "")); strings.Contains(strings.ToLower(rest), "default") {
				prm.Description = strings.TrimSpace(prm.Description + "\n\n" + rest)
			}
		}
	}
	if prm.Kind == Flag && prm.Type != "boolean" {
		bad(typeLine, "### %s: a flag is a bool, not %s", prm.Name, prm.Type)
	}
	if prm.Type == "array" {
		prm.Variadic = true
	}
	if prm.Variadic && prm.Kind == Positional {
		prm.Type = "array"
	}
}

// checkParams checks the parameters together: unique names, positions 0,
// 1, 2 … without gaps (given or in the order written), a variadic positional
// last, no required positional after an optional one.
func (p *parser) checkParams(ps []Param, lines []int, auto map[int]bool, bad func(int, string, ...any)) bool {
	ok := true
	names := map[string]bool{}
	for i, prm := range ps {
		if names[prm.Name] {
			bad(lines[i], "parameter %q given twice", prm.Name)
			ok = false
		}
		names[prm.Name] = true
	}
	taken := map[int]bool{}
	for i, prm := range ps {
		if prm.Kind == Positional && !auto[i] {
			taken[prm.Position] = true
		}
	}
	next := 0
	for i := range ps {
		if ps[i].Kind == Positional && auto[i] {
			for taken[next] {
				next++
			}
			ps[i].Position = next
			taken[next] = true
		}
	}
	type positional struct {
		Param
		line int
	}
	var pos []positional
	for i, prm := range ps {
		if prm.Kind == Positional {
			pos = append(pos, positional{prm, lines[i]})
		}
	}
	sort.SliceStable(pos, func(i, j int) bool { return pos[i].Position < pos[j].Position })
	for i, prm := range pos {
		if prm.Position != i {
			bad(prm.line, "positional %s is at position %d: positions are 0, 1, 2 … without gaps or repeats", prm.Name, prm.Position)
			return false
		}
		if prm.Variadic && i != len(pos)-1 {
			bad(prm.line, "positional %s takes the rest of the arguments (N+ or a list) but is not the last", prm.Name)
			return false
		}
		if prm.Required && i > 0 && !pos[i-1].Required {
			bad(prm.line, "required positional %s comes after optional %s", prm.Name, pos[i-1].Name)
			return false
		}
	}
	return ok
}

// cutPrefixFold is strings.CutPrefix ignoring ASCII case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// joinParagraphs joins trimmed lines: lines of a paragraph with a space,
// paragraphs with a blank line.
func joinParagraphs(lines []string) string {
	var paras []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, strings.Join(cur, " "))
			cur = nil
		}
	}
	for _, l := range lines {
		if l == "" {
			flush()
			continue
		}
		cur = append(cur, l)
	}
	flush()
	return strings.Join(paras, "\n\n")
}

// String is the heading of the parameter as ## Parameters writes it.
func (prm Param) String() string {
	req := "optional"
	if prm.Required {
		req = "required"
	}
	switch prm.Kind {
	case Positional:
		plus := ""
		if prm.Variadic {
			plus = "+"
		}
		return fmt.Sprintf("%s (%s, positional position %d%s)", prm.Name, req, prm.Position, plus)
	case Flag:
		return fmt.Sprintf("%s (%s, flag)", prm.Option, req)
	default:
		return fmt.Sprintf("%s (%s, named parameter)", prm.Option, req)
	}
}
