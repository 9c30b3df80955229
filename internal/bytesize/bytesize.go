// Package bytesize reads and writes byte sizes with binary units, as the
// serve flags (--disk-quota) and the config file (profiles' limits) take
// them.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

type unit struct {
	suffix string
	shift  uint
}

// flagUnits are the units Parse takes, longest first: every one a power of
// 1024 (a flag's "10G" has always meant 10 GiB).
var flagUnits = []unit{
	{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10},
	{"TB", 40}, {"GB", 30}, {"MB", 20}, {"KB", 10},
	{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10},
}

// strictUnits are the units ParseStrict takes: only the unambiguous ones.
var strictUnits = flagUnits[:4]

// Parse reads a flag's size: a number with a binary unit (10GiB, 512MiB,
// 1.5GiB, 64 MiB; K, M, G, T and KB ... TB are powers of 1024 too), or 0.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	if v, ok := withUnit(t, flagUnits, true); ok {
		return v, nil
	}
	return 0, fmt.Errorf("%q: want a size with a unit, like 10GiB or 512MiB, or 0", s)
}

// ParseStrict reads a size of a config file: a whole number of bytes
// ("1073741824"), or a number with KiB, MiB, GiB or TiB and nothing between
// them ("2GiB", "1.5GiB"). Units that could be read as powers of 1000 (GB,
// G) and spaces are refused.
func ParseStrict(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 && !strings.HasPrefix(s, "+") {
		return n, nil
	}
	if v, ok := withUnit(s, strictUnits, false); ok {
		return v, nil
	}
	return 0, fmt.Errorf("%q is not a size (e.g. 2GiB)", s)
}

func withUnit(t string, units []unit, spaced bool) (int64, bool) {
	for _, u := range units {
		n, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		if spaced {
			n = strings.TrimSpace(n)
		}
		if n == "" || strings.ContainsAny(n, " \t+eEnNxX_") { // no signs, exponents, NaN, Inf, hex or digit separators
			return 0, false
		}
		f, err := strconv.ParseFloat(n, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || f*float64(int64(1)<<u.shift) >= math.MaxInt64 {
			return 0, false
		}
		return int64(f * float64(int64(1)<<u.shift)), true
	}
	return 0, false
}

// Format writes a size in the largest binary unit that divides it (10GiB,
// 1536MiB), else in bytes.
func Format(v int64) string {
	for _, u := range strictUnits {
		if v != 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatInt(v>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10)
}
