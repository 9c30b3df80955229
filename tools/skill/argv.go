package skill

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/skills"
)

// Argv is the command line of one call of an executable skill whose folder
// is dir, from the call's arguments (a JSON object decoded into a map; the
// numbers may be json.Number or float64):
//
//   - the interpreter by the script's extension: "bash" for .sh, "python3"
//     for .py, else the script itself (it must then be executable);
//   - the positional parameters in Position order, a list spread into one
//     argument per element;
//   - then the named parameters and flags in the order of ## Parameters: a
//     named parameter as "--name VALUE" (a list repeats "--name" before each
//     element), a flag as "--name" when true and nothing when false.
//
// Each value is one argv element: nothing is ever parsed by a shell, so
// "; rm -rf /workspace" reaches the script as that one string. Values are
// type-checked (an integer must be integral, a flag a boolean, ...); null
// is the same as not given. A positional value beginning with '-' is
// refused: the script would read it as an option (an injected "--force",
// or "-rf"), and "--" to end the options is not understood by every
// script. A named value may begin with '-': it follows its option, whose
// value it is. A missing optional positional may not be followed by a given
// one (the later one would take its place). A NUL byte cannot be passed
// to a program and is refused.
func Argv(s *skills.Skill, dir string, args map[string]any) ([]string, error) {
	if s == nil || s.Exec == nil {
		return nil, fmt.Errorf("skill is not executable")
	}
	if err := checkExec(s.Exec); err != nil {
		return nil, fmt.Errorf("skill %q: %w", s.Path, err)
	}
	entry, _ := cleanRel(s.Exec.Entry) // checked by checkExec
	script := filepath.Join(dir, filepath.FromSlash(entry))
	var argv []string
	switch strings.ToLower(filepath.Ext(entry)) {
	case ".sh":
		argv = []string{"bash", script}
	case ".py":
		argv = []string{"python3", script}
	default:
		argv = []string{script}
	}

	known := map[string]bool{}
	for _, p := range s.Exec.Params {
		known[p.Name] = true
	}
	var unknown []string
	for k := range args {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		names := make([]string, 0, len(known))
		for _, p := range s.Exec.Params {
			names = append(names, p.Name)
		}
		return nil, fmt.Errorf("unknown parameter %s; the parameters are %s", quoteNames(unknown), quoteNames(names))
	}
	given := func(p skills.Param) (any, bool) {
		v, ok := args[p.Name]
		return v, ok && v != nil
	}

	var skipped *skills.Param
	for _, p := range positionals(s.Exec.Params) {
		v, ok := given(p)
		if !ok {
			if p.Required {
				return nil, fmt.Errorf("missing required parameter `%s`", p.Name)
			}
			if skipped == nil {
				skipped = &p
			}
			continue
		}
		vals, err := values(p, v)
		if err != nil {
			return nil, err
		}
		if len(vals) == 0 {
			continue // an empty list
		}
		if skipped != nil {
			return nil, fmt.Errorf("`%s` (position %d) is given but `%s` (position %d) is not: a positional argument cannot be left out before one that is given", p.Name, p.Position, skipped.Name, skipped.Position)
		}
		for _, a := range vals {
			if strings.HasPrefix(a, "-") {
				return nil, fmt.Errorf("`%s` is %q: a positional value may not begin with '-', the script would read it as an option", p.Name, a)
			}
		}
		argv = append(argv, vals...)
	}

	for _, p := range s.Exec.Params {
		if p.Kind == skills.Positional {
			continue
		}
		v, ok := given(p)
		if !ok {
			if p.Required {
				return nil, fmt.Errorf("missing required parameter `%s`", p.Name)
			}
			continue
		}
		if p.Kind == skills.Flag {
			b, isBool := v.(bool)
			if !isBool {
				return nil, fmt.Errorf("`%s` must be a boolean, not %s", p.Name, kindOf(v))
			}
			if b {
				argv = append(argv, option(p))
			}
			continue
		}
		vals, err := values(p, v)
		if err != nil {
			return nil, err
		}
		for _, a := range vals {
			argv = append(argv, option(p), a)
		}
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return nil, fmt.Errorf("an argument holds a NUL byte, which no program can be given")
		}
	}
	return argv, nil
}

// values are the command-line arguments of one parameter's value.
func values(p skills.Param, v any) ([]string, error) {
	if !isList(p) {
		a, err := scalar(p.Name, p.Type, v)
		if err != nil {
			return nil, err
		}
		return []string{a}, nil
	}
	var elems []any
	switch l := v.(type) {
	case []any:
		elems = l
	case []string:
		for _, e := range l {
			elems = append(elems, e)
		}
	default:
		return nil, fmt.Errorf("`%s` must be an array, not %s", p.Name, kindOf(v))
	}
	if p.Required && len(elems) == 0 {
		return nil, fmt.Errorf("`%s` must have at least 1 item", p.Name)
	}
	out := make([]string, 0, len(elems))
	for i, e := range elems {
		a, err := scalar(fmt.Sprintf("%s[%d]", p.Name, i), itemType(p), e)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

var plainDecimal = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// scalar is the command-line text of one value of JSON type typ.
func scalar(name, typ string, v any) (string, error) {
	switch typ {
	case "", "string":
		if s, ok := v.(string); ok {
			return s, nil
		}
		return "", fmt.Errorf("`%s` must be a string, not %s", name, kindOf(v))
	case "boolean":
		if b, ok := v.(bool); ok {
			return strconv.FormatBool(b), nil
		}
		return "", fmt.Errorf("`%s` must be a boolean, not %s", name, kindOf(v))
	case "integer":
		switch n := v.(type) {
		case json.Number:
			if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
				return strconv.FormatInt(i, 10), nil
			}
			f, err := strconv.ParseFloat(n.String(), 64)
			if err != nil {
				return "", fmt.Errorf("`%s` must be an integer, got %s", name, n)
			}
			return integral(name, f)
		case float64:
			return integral(name, n)
		case int:
			return strconv.Itoa(n), nil
		case int64:
			return strconv.FormatInt(n, 10), nil
		}
		return "", fmt.Errorf("`%s` must be an integer, not %s", name, kindOf(v))
	case "number":
		var f float64
		switch n := v.(type) {
		case json.Number:
			var err error
			if f, err = strconv.ParseFloat(n.String(), 64); err != nil || math.IsInf(f, 0) {
				return "", fmt.Errorf("`%s` must be a number, got %s", name, n)
			}
			if plainDecimal.MatchString(n.String()) {
				return n.String(), nil // as written: no precision lost
			}
		case float64:
			f = n
		case int:
			return strconv.Itoa(n), nil
		case int64:
			return strconv.FormatInt(n, 10), nil
		default:
			return "", fmt.Errorf("`%s` must be a number, not %s", name, kindOf(v))
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return "", fmt.Errorf("`%s` must be a finite number", name)
		}
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("`%s` has the unknown type %q", name, typ)
}

// integral formats f as an integer if it is one that fits in 64 bits.
func integral(name string, f float64) (string, error) {
	if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("`%s` must be an integer, got %s", name, strconv.FormatFloat(f, 'g', -1, 64))
	}
	if f < -(1<<63) || f >= 1<<63 {
		return "", fmt.Errorf("`%s` must be an integer between -2^63 and 2^63-1, got %s", name, strconv.FormatFloat(f, 'g', -1, 64))
	}
	return strconv.FormatInt(int64(f), 10), nil
}

func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64, int, int64:
		return "a number"
	case []any, []string:
		return "an array"
	case map[string]any:
		return "an object"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "`" + n + "`"
	}
	return strings.Join(q, ", ")
}
