package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeFlag is a byte size given with a binary unit: 10GiB, 512MiB, 1.5GiB
// (K, M, G, T and KiB, MiB, GiB, TiB are all powers of 1024), or 0.
type sizeFlag int64

var sizeUnits = []struct {
	suffix string
	shift  uint
}{
	{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10},
	{"TB", 40}, {"GB", 30}, {"MB", 20}, {"KB", 10},
	{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10},
}

func (s *sizeFlag) String() string {
	v := int64(*s)
	for _, u := range []struct {
		name  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if v != 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatInt(v>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(v, 10)
}

func (s *sizeFlag) Set(v string) error {
	t := strings.TrimSpace(v)
	if t == "0" {
		*s = 0
		return nil
	}
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || f*float64(int64(1)<<u.shift) >= math.MaxInt64 {
				break
			}
			*s = sizeFlag(f * float64(int64(1)<<u.shift))
			return nil
		}
	}
	return fmt.Errorf("%q: want a size with a unit, like 10GiB or 512MiB, or 0", v)
}
