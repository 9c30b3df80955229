package inject

import (
	"fmt"
	"net/textproto"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// secretNameRe is a secret's name, as --secrets-file and
// SANDBOXD_SECRET_<NAME> spell it: also the name of the sandbox's
// environment variable that holds its placeholder.
var secretNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Template is a header value with ${NAME} references to the daemon's
// secrets: "Bearer ${GITHUB_TOKEN}". A '$' not followed by '{' is
// literal; there is no escape for a literal "${".
type Template struct {
	parts []part
}

type part struct {
	lit  string // literal text, or
	name string // a secret's name
}

// MaxTemplate bounds a template's length (a header value of the config).
const MaxTemplate = 4096

// ParseTemplate parses a rule's value. The literal text must be valid in
// a header value (no CR, LF or NUL); each reference must name a secret
// (letters, digits and '_', not starting with a digit).
func ParseTemplate(s string) (Template, error) {
	if len(s) > MaxTemplate {
		return Template{}, fmt.Errorf("is longer than %d bytes", MaxTemplate)
	}
	var t Template
	for rest := s; rest != ""; {
		i := strings.Index(rest, "${")
		if i < 0 {
			t.parts = append(t.parts, part{lit: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, part{lit: rest[:i]})
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return Template{}, fmt.Errorf("%q: a ${ without its closing }", s)
		}
		name := rest[i+2 : i+end]
		if !secretNameRe.MatchString(name) {
			return Template{}, fmt.Errorf("%q: ${%s} does not name a secret (letters, digits and '_', not starting with a digit)", s, name)
		}
		t.parts = append(t.parts, part{name: name})
		rest = rest[i+end+1:]
	}
	for _, p := range t.parts {
		if p.lit != "" && !httpguts.ValidHeaderFieldValue(p.lit) {
			return Template{}, fmt.Errorf("%q is not a valid header value (control characters)", s)
		}
	}
	return t, nil
}

// Names are the secrets the template references, in order, each once.
func (t Template) Names() []string {
	var names []string
	for _, p := range t.parts {
		if p.name != "" && !slices.Contains(names, p.name) {
			names = append(names, p.name)
		}
	}
	return names
}

// expand fills the references from values (every name present).
func (t Template) expand(values map[string]string) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.name != "" {
			b.WriteString(values[p.name])
		} else {
			b.WriteString(p.lit)
		}
	}
	return b.String()
}

// forbiddenHeaders frame the message or the connection, or route it: a
// rule may not set them.
var forbiddenHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Keep-Alive": true,
	"Upgrade": true, "Te": true, "Trailer": true, "Proxy-Connection": true, "Proxy-Authorization": true,
	"Proxy-Authenticate": true, "Expect": true,
}

// CheckHeader checks a rule's header name: a valid field name that does
// not frame, route or upgrade the message (Host, Content-Length,
// Transfer-Encoding, Connection, ...).
func CheckHeader(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("%q is not a header name", name)
	}
	if c := textproto.CanonicalMIMEHeaderKey(name); forbiddenHeaders[c] {
		return fmt.Errorf("%s frames or routes the request: a rule cannot set it", c)
	}
	return nil
}

// CheckSecretValue checks that a secret's value can go in a header: not
// empty, no CR, LF or NUL. The error never holds the value.
func CheckSecretValue(name, value string) error {
	switch {
	case value == "":
		return fmt.Errorf("secret %s is empty", name)
	case !httpguts.ValidHeaderFieldValue(value):
		return fmt.Errorf("secret %s holds characters a header value cannot (CR, LF, NUL or other controls)", name)
	}
	return nil
}
