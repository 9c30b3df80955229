package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/internal/bytesize"
	"github.com/sandboxd/sandboxd/sandbox"
)

// decoder reads one option's value node into its field. pos records where
// nested keys were written (key is the option's name in pos: "limits").
type decoder func(p *parser, v *yaml.Node, path string, pos map[string]position, key string)

// sessionFields are the keys of a profile that are session options, one
// per field of sandbox.SessionOptions, named as Validate names them (so its
// problems are reported at the right line). A new session option is one
// line here.
func sessionFields(o *sandbox.SessionOptions) map[string]decoder {
	return map[string]decoder{
		"image":           str(&o.Image),
		"env":             strMap(&o.Env),
		"cwd":             str(&o.Cwd),
		"user":            str(&o.User),
		"limits":          limits(&o.Limits),
		"network":         str(&o.Network),
		"allow_hosts":     strList(&o.AllowHosts),
		"idle_timeout":    idleTimeout(&o.IdleTimeout),
		"labels":          strMap(&o.Labels),
		"writable_rootfs": boolean(&o.WritableRootfs),
		"editable_paths":  strList(&o.EditablePaths),
		"runtime":         str(&o.Runtime),
		"skills":          skills(&o.Skills),
		"skills_install":  str(&o.SkillsInstall),
		"mcp_servers":     mcpServers(&o.MCPServers),
		"terminal":        section(terminalFields(&o.Terminal)),
		"shell_init":      str(&o.ShellInit),
		"entrypoint":      str(&o.Entrypoint),
		"tool_set":        str(&o.ToolSet),
		"inject":          injectRules(&o.Inject),
	}
}

// terminalFields are the keys of a profile's terminal, one per
// sandbox.TerminalOptions field.
func terminalFields(t *sandbox.TerminalOptions) map[string]decoder {
	return map[string]decoder{
		"no_change_timeout": duration(&t.NoChangeTimeout),
	}
}

// limitFields are the keys of a profile's limits, one per sandbox.Limits
// field.
func limitFields(l *sandbox.Limits) map[string]decoder {
	return map[string]decoder{
		"memory":     size(&l.Memory),
		"cpus":       number(&l.CPUs),
		"pids":       whole(&l.Pids),
		"tmpfs":      size(&l.Tmpfs),
		"disk":       size(&l.Disk),
		"disk_quota": size(&l.DiskQuota),
	}
}

func str(dst *string) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		if s, ok := p.str(v, path); ok {
			*dst = s
		}
	}
}

func boolean(dst *bool) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		n := p.resolve(v)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			p.errorf(n, path, "want true or false, not %s", kindName(n))
			return
		}
		b, err := strconv.ParseBool(n.Value)
		if err != nil {
			p.errorf(n, path, "want true or false, not %s", kindName(n))
			return
		}
		*dst = b
	}
}

func strList(dst *[]string) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		out := []string{}
		if p.list(v, path, func(i int, item *yaml.Node) {
			if s, ok := p.str(item, fmt.Sprintf("%s[%d]", path, i)); ok {
				out = append(out, s)
			}
		}) {
			*dst = out
		}
	}
}

// strMap reads a mapping of names to string values (env, labels). A value
// that YAML reads as a number or boolean is taken as written ("1", "true").
func strMap(dst *map[string]string) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		m := map[string]string{}
		p.mapping(v, path, func(key string, _, val *yaml.Node) {
			if s, ok := p.str(val, join(path, key)); ok {
				m[key] = s
			}
		})
		*dst = m
	}
}

func limits(l *sandbox.Limits) decoder { return section(limitFields(l)) }

// section reads a mapping whose keys are fields.
func section(fields map[string]decoder) decoder {
	return func(p *parser, v *yaml.Node, path string, pos map[string]position, key string) {
		p.mapping(v, path, func(name string, k, val *yaml.Node) {
			dec, ok := fields[name]
			if !ok {
				known := make([]string, 0, len(fields))
				for f := range fields {
					known = append(known, f)
				}
				p.unknown(k, path, name, known...)
				return
			}
			pos[key+"."+name] = position{k.Line, k.Column}
			dec(p, val, join(path, name), pos, key+"."+name)
		})
	}
}

// size reads a size: a whole number of bytes, or a string with a binary
// unit ("2GiB", "512MiB").
func size(dst *int64) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		n := p.resolve(v)
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!str") {
			p.errorf(n, path, "want a size such as 2GiB or 512MiB, or a number of bytes, not %s", kindName(n))
			return
		}
		b, err := bytesize.ParseStrict(n.Value)
		if err != nil {
			p.errorf(n, path, "%v", err)
			return
		}
		*dst = b
	}
}

func whole(dst *int64) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		if n, ok := p.integer(v, path); ok {
			*dst = n
		}
	}
}

func number(dst *float64) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		n := p.resolve(v)
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
			p.errorf(n, path, "want a number, not %s", kindName(n))
			return
		}
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			p.errorf(n, path, "%q is not a number", n.Value)
			return
		}
		*dst = f
	}
}

// idleTimeout reads a duration with a unit ("30m", "1h30m") or "never".
func idleTimeout(dst *time.Duration) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		n := p.resolve(v)
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
			if n.Value == "never" {
				*dst = sandbox.NoIdleTimeout
				return
			}
			if d, err := time.ParseDuration(n.Value); err == nil && d > 0 {
				*dst = d
				return
			}
		}
		p.errorf(n, path, "%s is not a duration such as 30m or 1h30m, or never", kindName(n))
	}
}

// duration reads a positive duration such as 30s or 2m.
func duration(dst *time.Duration) decoder {
	return func(p *parser, v *yaml.Node, path string, _ map[string]position, _ string) {
		n := p.resolve(v)
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
			if d, err := time.ParseDuration(n.Value); err == nil && d > 0 {
				*dst = d
				return
			}
		}
		p.errorf(n, path, "%s is not a duration such as 30s or 2m", kindName(n))
	}
}

// skills reads "all" or a list of path prefixes.
func skills(dst *[]string) decoder {
	return func(p *parser, v *yaml.Node, path string, pos map[string]position, key string) {
		n := p.resolve(v)
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
			if n.Value != sandbox.SkillsAll {
				p.errorf(n, path, "%q: want %q or a list of skill path prefixes (such as [fuzz, review/go])", n.Value, sandbox.SkillsAll)
				return
			}
			*dst = []string{sandbox.SkillsAll}
			return
		}
		strList(dst)(p, v, path, pos, key)
	}
}

// mcpServers reads a profile's MCP sidecars: a list of mappings, one key
// per sandbox.MCPServer field.
func mcpServers(dst *[]sandbox.MCPServer) decoder {
	return func(p *parser, v *yaml.Node, path string, pos map[string]position, key string) {
		out := []sandbox.MCPServer{}
		p.list(v, path, func(i int, item *yaml.Node) {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			var s sandbox.MCPServer
			fields := map[string]decoder{
				"name":        str(&s.Name),
				"image":       str(&s.Image),
				"command":     strList(&s.Command),
				"args":        strList(&s.Args),
				"env":         strMap(&s.Env),
				"transport":   str(&s.Transport),
				"path":        str(&s.Path),
				"start":       str(&s.Start),
				"workspace":   str(&s.Workspace),
				"user":        str(&s.User),
				"network":     str(&s.Network),
				"allow_hosts": strList(&s.AllowHosts),
				"limits": section(map[string]decoder{
					"memory": size(&s.Limits.Memory),
					"cpus":   number(&s.Limits.CPUs),
					"pids":   whole(&s.Limits.Pids),
				}),
			}
			p.mapping(item, ipath, func(k string, kn, val *yaml.Node) {
				kpath := join(ipath, k)
				if k == "secrets" {
					s.Secrets = p.mcpSecrets(val, kpath)
					return
				}
				if k == "port" {
					if n, ok := p.integer(val, kpath); ok {
						if n < 1 || n > 65535 {
							p.errorf(p.resolve(val), kpath, "%d: want 1 to 65535", n)
						}
						s.Port = int(n)
					}
					return
				}
				dec, ok := fields[k]
				if !ok {
					p.unknown(kn, ipath, k, append(slices.Collect(maps.Keys(fields)), "port", "secrets")...)
					return
				}
				dec(p, val, kpath, pos, key)
			})
			out = append(out, s)
		})
		*dst = out
	}
}

// mcpSecrets reads a sidecar's secrets: a list of {name, env}.
func (p *parser) mcpSecrets(v *yaml.Node, path string) []sandbox.MCPSecret {
	out := []sandbox.MCPSecret{}
	p.list(v, path, func(i int, item *yaml.Node) {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		var sec sandbox.MCPSecret
		p.mapping(item, ipath, func(k string, kn, val *yaml.Node) {
			switch k {
			case "name":
				sec.Name, _ = p.str(val, join(ipath, k))
			case "env":
				sec.Env, _ = p.str(val, join(ipath, k))
			default:
				p.unknown(kn, ipath, k, "env", "name")
			}
		})
		out = append(out, sec)
	})
	return out
}

// injectRules reads a profile's inject: a list of {host, header, value},
// each key's place kept (pos "inject[i].host"), so a problem found later
// (a secret the daemon lacks) is reported at its line.
func injectRules(dst *[]sandbox.InjectRule) decoder {
	return func(p *parser, v *yaml.Node, path string, pos map[string]position, key string) {
		out := []sandbox.InjectRule{}
		p.list(v, path, func(i int, item *yaml.Node) {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			ikey := fmt.Sprintf("%s[%d]", key, i)
			var r sandbox.InjectRule
			fields := map[string]*string{"host": &r.Host, "header": &r.Header, "value": &r.Value}
			if n := p.resolve(item); n != nil {
				pos[ikey] = position{n.Line, n.Column}
			}
			p.mapping(item, ipath, func(k string, kn, val *yaml.Node) {
				f, ok := fields[k]
				if !ok {
					p.unknown(kn, ipath, k, "header", "host", "value")
					return
				}
				pos[ikey+"."+k] = position{kn.Line, kn.Column}
				str(f)(p, val, join(ipath, k), pos, key)
			})
			for _, k := range []string{"host", "header", "value"} {
				if _, ok := pos[ikey+"."+k]; !ok {
					p.errorf(p.resolve(item), ipath, "%s is missing (a rule has host, header and value)", k)
				}
			}
			out = append(out, r)
		})
		*dst = out
	}
}
