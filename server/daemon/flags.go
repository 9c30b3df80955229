package daemon

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/bytesize"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/config"
)

// UsageError is a bad configuration, naming the flag at fault: the caller
// shows it as a usage error (sandboxd exits 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// List is a repeatable, comma-separable string flag.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }
func (l *List) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// Paths is a repeatable flag of paths (not comma-separated: a path may
// hold a comma).
type Paths []string

func (l *Paths) String() string { return strings.Join(*l, ":") }
func (l *Paths) Set(v string) error {
	if v == "" {
		return errors.New("empty path")
	}
	*l = append(*l, v)
	return nil
}

// KeyValues is a repeatable KEY=VALUE flag.
type KeyValues map[string]string

func (e KeyValues) String() string { return "" }
func (e KeyValues) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	e[k] = val
	return nil
}

// Size is a byte size given with a binary unit: 10GiB, 512MiB, 1.5GiB
// (K, M, G, T and KiB, MiB, GiB, TiB are all powers of 1024), or 0.
type Size int64

func (s *Size) String() string { return bytesize.Format(int64(*s)) }

func (s *Size) Set(v string) error {
	n, err := bytesize.Parse(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// Pool is --pool: N (a fixed pool) or MIN:MAX (one that follows demand).
type Pool struct{ Min, Max int }

func (p *Pool) String() string {
	if p.Max > p.Min {
		return fmt.Sprintf("%d:%d", p.Min, p.Max)
	}
	return strconv.Itoa(p.Min)
}

func (p *Pool) Set(v string) error {
	lo, hi, elastic := strings.Cut(v, ":")
	minN, err := strconv.Atoi(strings.TrimSpace(lo))
	maxN := minN
	if err == nil && elastic {
		maxN, err = strconv.Atoi(strings.TrimSpace(hi))
	}
	switch {
	case err != nil:
		return fmt.Errorf("%q: want N (a fixed pool) or MIN:MAX", v)
	case minN < 0 || maxN > config.MaxPool:
		return fmt.Errorf("%q: want sizes from 0 (no warm pool) to %d", v, config.MaxPool)
	case maxN < minN:
		return fmt.Errorf("%q: MAX is below MIN", v)
	}
	p.Min, p.Max = minN, maxN
	return nil
}

// options are the pool's size as sandbox.PoolOptions (Size is its min).
func (p Pool) options(o sandbox.SessionOptions) sandbox.PoolOptions {
	po := sandbox.PoolOptions{Options: o, Size: p.Min}
	if p.Max > p.Min {
		po.Max = p.Max
	}
	return po
}
