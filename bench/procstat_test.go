package main

import (
	"strings"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis, as a process may name
	// itself; utime 250 and stime 50 ticks.
	line := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000 200 18446744073709551615\n"
	got, err := statCPU([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * time.Second; got != want {
		t.Errorf("statCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "4242 no-parens S 1", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 u s 0"} {
		if _, err := statCPU([]byte(bad)); err == nil {
			t.Errorf("statCPU(%q): no error", bad)
		}
	}
}

func TestReadKB(t *testing.T) {
	status := "Name:\tsandboxd\nVmPeak:\t  20000 kB\nVmRSS:\t   15724 kB\nThreads:\t7\n"
	got, err := readKB(strings.NewReader(status), "VmRSS")
	if err != nil || got != 15724 {
		t.Errorf("readKB(VmRSS) = %d, %v; want 15724", got, err)
	}
	if _, err := readKB(strings.NewReader(status), "MemAvailable"); err == nil {
		t.Error("readKB of a missing key: no error")
	}
	// VmRSS must not match a key it only prefixes or that prefixes it.
	if _, err := readKB(strings.NewReader("VmRSSx: 1 kB\n"), "VmRSS"); err == nil {
		t.Error("readKB matched another key")
	}
}

func TestQuantileAndPick(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]float64{0.5: 5, 0.99: 10, 0: 1, 1: 10} {
		if got := quantile(s, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if quantile(nil, 0.5) != 0 || pick(nil, 0.5) != 0 {
		t.Error("empty samples: not 0")
	}
	if got := pick([]int64{10, 20, 30}, 0.5); got != 20 {
		t.Errorf("pick = %d, want 20", got)
	}
}
