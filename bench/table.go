package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sample is the timing of one scenario.
type sample struct {
	n        int
	p50, p99 time.Duration
}

// measure runs fn warmup times untimed, then n times timed.
func measure(n, warmup int, fn func() error) (sample, error) {
	for range warmup {
		if err := fn(); err != nil {
			return sample{}, err
		}
	}
	ds := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		if err := fn(); err != nil {
			return sample{}, err
		}
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return sample{n: n, p50: ds[(n-1)/2], p99: ds[int(math.Ceil(float64(n)*0.99))-1]}, nil
}

// row is one line of the result table.
type row struct {
	scenario string
	s        sample
	baseline string // what the scenario is compared with ("" if nothing)
	base     sample
	// target says what "good" is, e.g. "p50 < 0.5 ms"; met checks it.
	target string
	met    func(r row) bool
}

func (r row) ratio() float64 {
	if r.baseline == "" || r.base.p50 == 0 {
		return 0
	}
	return float64(r.s.p50) / float64(r.base.p50)
}

// Targets.
func p50Below(d time.Duration) (string, func(row) bool) {
	v := strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
	return "p50 < " + v + " ms", func(r row) bool { return r.s.p50 < d }
}

func ratioAtMost(x float64) (string, func(row) bool) {
	return fmt.Sprintf("≤ %.1fx baseline", x), func(r row) bool { return r.ratio() <= x }
}

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.3f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func printTable(w io.Writer, rows []row) error {
	var b strings.Builder
	b.WriteString("| scenario | p50 | p99 | baseline | baseline p50 | ratio | target | met? |\n")
	b.WriteString("|---|---:|---:|---|---:|---:|---|---|\n")
	for _, r := range rows {
		base, baseP50, ratio := "—", "—", "—"
		if r.baseline != "" {
			base, baseP50, ratio = "`"+r.baseline+"`", ms(r.base.p50), fmt.Sprintf("%.2fx", r.ratio())
			if x := r.ratio(); x > 0 && x < 0.1 {
				ratio += fmt.Sprintf(" (%.0fx faster)", 1/x)
			}
		}
		target, met := "—", "—"
		if r.target != "" {
			target, met = r.target, "no"
			if r.met(r) {
				met = "yes"
			}
		}
		fmt.Fprintf(&b, "| %s (n=%d) | %s | %s | %s | %s | %s | %s | %s |\n",
			r.scenario, r.s.n, ms(r.s.p50), ms(r.s.p99), base, baseP50, ratio, target, met)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
