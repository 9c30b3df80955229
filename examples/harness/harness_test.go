package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestParseUnittest(t *testing.T) {
	log := strings.Join([]string{
		"Checking patch tests/test_stats.py...",
		">>>>> tests start",
		"test_mean (tests.test_stats.TestStats.test_mean) ... ok", // 3.11+
		"test_summary (tests.test_stats.TestStats) ... FAIL",      // before 3.11
		"test_doc (tests.test_stats.TestStats.test_doc)",          // a docstring's line follows
		"The mean of one value is the value. ... ok",              //
		"test_prints (tests.test_x.T.test_prints) ... hello",      // printed output, status later
		"ok", //
		"test_err (tests.test_x.T.test_err) ... ERROR",          //
		"test_skip (tests.test_x.T.test_skip) ... skipped 'no'", //
		"test_xf (tests.test_x.T.test_xf) ... expected failure", //
		"test_median (unittest.loader._FailedTest.test_median) ... ERROR",
		"test_win (tests.test_x.T.test_win) ... ok\r",
		"garbage ( ... ok",
		"",
		"FAIL: test_summary (tests.test_stats.TestStats)", // the failure report is not a status
		"Ran 9 tests in 0.002s",
	}, "\n")
	got := parseUnittest([]byte(log))
	want := map[string]bool{
		"tests.test_stats.TestStats.test_mean":    true,
		"tests.test_stats.TestStats.test_summary": false,
		"tests.test_stats.TestStats.test_doc":     true,
		"tests.test_x.T.test_prints":              true,
		"tests.test_x.T.test_err":                 false,
		"tests.test_x.T.test_skip":                false,
		"tests.test_x.T.test_xf":                  true,
		"unittest.loader._FailedTest.test_median": false,
		"tests.test_x.T.test_win":                 true,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
}

func TestBuiltinInstances(t *testing.T) {
	ins, err := instancesFrom("")
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) < 3 {
		t.Fatalf("%d built-in instances, want at least 3", len(ins))
	}
	for _, in := range ins {
		if in.BaseImage != "" && len(in.imageDiff) == 0 {
			t.Errorf("%s: base_image without image.diff", in.ID)
		}
	}
}

// fakeBox replays a test log and records the commands.
type fakeBox struct {
	files    map[string][]byte
	applyOut string
	applyErr int
	evalExit int
	log      string
	closed   bool
}

func (f *fakeBox) put(_ context.Context, name string, data []byte) error {
	f.files[name] = data
	return nil
}

func (f *fakeBox) run(_ context.Context, command string, _ time.Duration) (int, string, error) {
	if strings.Contains(command, "patch.diff") {
		return f.applyErr, f.applyOut, nil
	}
	return f.evalExit, "", nil
}

func (f *fakeBox) get(_ context.Context, name string) ([]byte, error) {
	if name != "eval.log" {
		return nil, errors.New("no such file")
	}
	return []byte(f.log), nil
}

func (f *fakeBox) close(context.Context) error { f.closed = true; return nil }

type fakeBackend struct {
	box *fakeBox
	err error
}

func (b fakeBackend) open(context.Context, *instance) (box, error) {
	if b.err != nil {
		return nil, b.err
	}
	return b.box, nil
}

func TestRunInstance(t *testing.T) {
	in := &instance{ID: "x", Image: "img", TestCommand: "run_tests.sh", patch: []byte("p"), testPatch: []byte("tp"),
		FailToPass: []string{"t.T.test_a", "t.T.test_b"}, PassToPass: []string{"t.T.test_c"}}
	passing := ">>>>> tests start\ntest_a (t.T.test_a) ... ok\ntest_b (t.T.test_b) ... ok\ntest_c (t.T.test_c) ... ok\n>>>>> tests exit 0\n"
	for _, tc := range []struct {
		name     string
		box      *fakeBox
		open     error
		resolved bool
		f2p, p2p int
		err      string
		fatal    bool
	}{
		{name: "resolved", box: &fakeBox{log: passing}, resolved: true, f2p: 2, p2p: 1},
		{name: "one F2P fails", box: &fakeBox{log: strings.Replace(passing, "test_b) ... ok", "test_b) ... FAIL", 1)}, f2p: 1, p2p: 1},
		{name: "patch does not apply", box: &fakeBox{applyErr: 1, applyOut: "Checking patch a.py...\nerror: patch failed: a.py:3\nerror: a.py: patch does not apply\n[The command completed with exit code 1.]"},
			err: "the patch does not apply (git apply exit 1): error: a.py: patch does not apply"},
		{name: "test patch does not apply", box: &fakeBox{evalExit: 3, log: "error: tests/t.py: patch does not apply\n>>>>> test patch does not apply\n"},
			err: "the test patch does not apply: error: tests/t.py: patch does not apply"},
		{name: "evaluation cut short", box: &fakeBox{evalExit: 137, log: ">>>>> tests start\n\x1b[31mKilled"}, err: "the evaluation did not finish (exit 137):  [31mKilled"},
		{name: "create refused", open: stopError{errors.New("the token was refused")}, err: "create: the token was refused", fatal: true},
		{name: "create fails", open: errors.New("no such image"), err: "create: no such image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.box != nil {
				tc.box.files = map[string][]byte{}
			}
			r := runInstance(context.Background(), fakeBackend{box: tc.box, err: tc.open}, in, time.Minute)
			if r.Resolved != tc.resolved || r.FailToPass != (tally{tc.f2p, 2}) || r.PassToPass != (tally{tc.p2p, 1}) || r.Error != tc.err || r.fatal != tc.fatal {
				t.Fatalf("got %+v", r)
			}
			if tc.box != nil {
				if !tc.box.closed {
					t.Fatal("the box was not closed")
				}
				if !bytes.Equal(tc.box.files["patch.diff"], in.patch) || !bytes.Contains(tc.box.files["eval.sh"], []byte("{ run_tests.sh ; }")) {
					t.Fatalf("files put in: %q", tc.box.files)
				}
			}
		})
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0"}, "-n 0: want 1 to 10000"},
		{[]string{"-parallel", "0"}, "-parallel 0: want 1 to 1000"},
		{[]string{"-backend", "k8s"}, `-backend "k8s": want sandboxd or docker`},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-instances", t.TempDir()}, "no instances (each is a folder"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != exitError || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, errb.String(), exitError, tc.want)
		}
	}
}

func TestConnectErrors(t *testing.T) {
	for _, tc := range []struct {
		addr, want string
	}{
		{"http://127.0.0.1:1", `-addr "http://127.0.0.1:1": want HOST:PORT or ws://HOST:PORT/v1/ws`},
		// Nothing listens on port 1 of loopback.
		{"127.0.0.1:1", "is `sandboxd serve` running there?"},
	} {
		_, err := connect(context.Background(), config{addr: tc.addr, token: "t"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.addr, err, tc.want)
		}
	}
}
