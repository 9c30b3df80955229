package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// secretEnvPrefix names a secret in the daemon's environment:
// SANDBOXD_SECRET_<NAME>. Only that prefix is read, so a client's sidecar
// can never be handed another variable of the daemon's.
const secretEnvPrefix = "SANDBOXD_SECRET_"

var secretNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// loadSecrets returns the lookup of the daemon's secrets: MCP sidecars'
// (profile mcp_servers[].secrets) and those inject rules send
// (inject[].value, setupInjection): the --secrets-file's NAME=VALUE lines first (a
// file only its owner may read; '#' lines and blank lines are skipped),
// then SANDBOXD_SECRET_<NAME> from the environment. No value is ever
// printed: errors name the line.
func loadSecrets(path string) (func(string) (string, bool), error) {
	file := map[string]string{}
	if path != "" {
		st, err := os.Stat(path)
		if err != nil {
			return nil, usageErrorf("--secrets-file: %v", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, usageErrorf("--secrets-file %s: readable by others (mode %v): chmod 600 it", path, st.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, usageErrorf("--secrets-file: %v", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, value, ok := strings.Cut(line, "=")
			switch {
			case !ok:
				return nil, usageErrorf("--secrets-file %s:%d: want NAME=VALUE", path, n)
			case !secretNameRe.MatchString(name):
				return nil, usageErrorf("--secrets-file %s:%d: %q is not a secret name (letters, digits and '_')", path, n, name)
			}
			if _, dup := file[name]; dup {
				return nil, usageErrorf("--secrets-file %s:%d: %s is given twice", path, n, name)
			}
			file[name] = value
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--secrets-file %s: %w", path, err)
		}
	}
	return func(name string) (string, bool) {
		if v, ok := file[name]; ok {
			return v, true
		}
		return os.LookupEnv(secretEnvPrefix + name)
	}, nil
}
