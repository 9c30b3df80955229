// Package daemon is sandboxd's composition root: the one place that
// assembles a daemon from its configuration (runtime → manager → skills
// library, secrets, profiles, sidecar-tool learning → backend → HTTP
// server). `sandboxd serve` parses flags into a Config (Defaults,
// RegisterFlags, Validate) and calls New; the benchmarks and the
// in-process e2e servers call the same New with their own Config, so every
// one of them runs the daemon `serve` runs.
//
// A runtime is chosen by name (Config.Runtime.Backend: "docker" today): a
// second runtime is one new case in newRuntime.
package daemon
