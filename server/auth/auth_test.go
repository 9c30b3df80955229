package auth

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOperatorTokenGeneratedOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	tok, path, created, err := OperatorToken("", dir)
	if err != nil || !created || len(tok) < MinTokenLength {
		t.Fatalf("first start: %q %v %v", tok, created, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v (%v)", st.Mode().Perm(), err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode %v", st.Mode().Perm())
	}
	again, _, created, err := OperatorToken("", dir)
	if err != nil || created || again != tok {
		t.Fatalf("second start: %q created=%v %v", again, created, err)
	}
	// The environment wins, and must be strong.
	env := strings.Repeat("e", MinTokenLength)
	if got, path, _, err := OperatorToken(env, dir); err != nil || got != env || path != "" {
		t.Fatalf("env token: %q %q %v", got, path, err)
	}
	if _, _, _, err := OperatorToken("short", dir); err == nil {
		t.Fatal("a short SANDBOXD_TOKEN was accepted")
	}
	// A token file others can read is refused.
	must(t, os.Chmod(path, 0o644))
	if _, _, _, err := OperatorToken("", dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable token file: %v", err)
	}
}

// The state directory is made private, and a token file that someone else
// could have planted or read is refused, not used.
func TestStateDirAndTokenFileChecks(t *testing.T) {
	// An existing directory others can enter is tightened to 0700.
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.Chmod(dir, 0o777))
	tok, path, _, err := OperatorToken("", dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	must(t, err)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("existing state dir left at mode %v", st.Mode().Perm())
	}

	// A symlink in place of the token file is refused, even to a good file.
	elsewhere := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(elsewhere, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(path))
	if err := os.Symlink(elsewhere, path); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := OperatorToken("", dir); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("symlinked token file: %v", err)
	}
	must(t, os.Remove(path))

	// A group-readable one is refused.
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := OperatorToken("", dir); err == nil {
		t.Fatal("a group-readable token file was used")
	}
	must(t, os.Chmod(path, 0o600))

	if os.Geteuid() != 0 {
		t.Skip("the ownership checks need root to chown")
	}
	// A token file of another user (planted while the directory was open).
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := OperatorToken("", dir); err == nil || !strings.Contains(err.Error(), "another user") {
		t.Fatalf("token file of another user: %v", err)
	}
	if _, err := ReadTokenFile(path); err == nil || !strings.Contains(err.Error(), "copy of your own") {
		t.Fatalf("ReadTokenFile of another user's token file: %v", err)
	}
	// A state directory of another user.
	other := filepath.Join(t.TempDir(), "other")
	must(t, os.Mkdir(other, 0o700))
	must(t, os.Chown(other, 65534, 65534))
	if _, _, _, err := OperatorToken("", other); err == nil || !strings.Contains(err.Error(), "another user") {
		t.Fatalf("state dir of another user: %v", err)
	}
}

func TestDigest(t *testing.T) {
	d := DigestOf("secret-token")
	if !d.Matches("secret-token") || d.Matches("secret-tokeN") || d.Matches("") {
		t.Fatal("digest comparison")
	}
	a, b := NewToken(), NewToken()
	if a == b || len(a) != 43 {
		t.Fatal("tokens are not fresh 256-bit base64url strings")
	}
}

func TestBearer(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		want   string
	}{
		{"authorization", http.Header{"Authorization": {"Bearer abc"}}, "abc"},
		{"lower-case scheme", http.Header{"Authorization": {"bearer abc"}}, "abc"},
		{"basic is not bearer", http.Header{"Authorization": {"Basic abc"}}, ""},
		{"subprotocol", http.Header{"Sec-Websocket-Protocol": {"sandboxd.v1, bearer.abc"}}, "abc"},
		{"authorization wins", http.Header{"Authorization": {"Bearer a"}, "Sec-Websocket-Protocol": {"bearer.b"}}, "a"},
		{"none", http.Header{}, ""},
	}
	for _, tt := range tests {
		r := &http.Request{Header: tt.header}
		if got := Bearer(r); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestHostPolicy(t *testing.T) {
	p := HostPolicy{Allowed: []string{"sandboxd.example"}}
	for host, want := range map[string]bool{
		"127.0.0.1:7070": true, "localhost:7070": true, "LOCALHOST": true, "[::1]:7070": true, "127.0.0.2": true,
		"sandboxd.example:443": true, "localhost.:7070": true,
		"evil.example:7070": false, "127.0.0.1.nip.io:7070": false, "": false, "10.0.0.1:7070": false,
	} {
		if got := p.Check(host); got != want {
			t.Errorf("Host %q: %v, want %v", host, got, want)
		}
	}
	if !(HostPolicy{Allowed: []string{"*"}}).Check("anything:1") {
		t.Error("* allows any host")
	}
}

func TestOriginPolicy(t *testing.T) {
	p := OriginPolicy{Allowed: []string{"https://app.example"}}
	for origin, want := range map[string]bool{
		"": true, "https://app.example": true, "HTTPS://APP.EXAMPLE": true,
		"https://app.example:444": false, "http://app.example": false, "https://evil.example": false, "null": false,
	} {
		if got := p.Check(origin); got != want {
			t.Errorf("Origin %q: %v, want %v", origin, got, want)
		}
	}
}

// A same-origin request passes without being listed: the exact Origin
// Python's websocket-client sends for ws://127.0.0.1:7070; other origins,
// another port among them, do not.
func TestOriginPolicySameOrigin(t *testing.T) {
	p := OriginPolicy{}
	for _, c := range []struct {
		origin, host string
		want         bool
	}{
		{"http://127.0.0.1:7070", "127.0.0.1:7070", true},
		{"https://localhost:7070", "LOCALHOST:7070", true},
		{"http://[::1]:7070", "[::1]:7070", true},
		{"", "127.0.0.1:7070", true},
		{"http://127.0.0.1:8000", "127.0.0.1:7070", false},
		{"http://127.0.0.1", "127.0.0.1:7070", false},
		{"http://evil.example:7070", "127.0.0.1:7070", false},
		{"null", "127.0.0.1:7070", false},
		{"file://127.0.0.1:7070", "127.0.0.1:7070", false},
		{"http://127.0.0.1:7070", "", false},
	} {
		if got := p.CheckRequest(c.origin, c.host); got != c.want {
			t.Errorf("Origin %q, Host %q: %v, want %v", c.origin, c.host, got, c.want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7070/v1/ws", nil)
	r.Header.Set("Origin", "http://127.0.0.1:7070")
	if code, msg := (RequestPolicy{}).Check(r); code != "" {
		t.Errorf("same-origin request refused: %s %s", code, msg)
	}
	r.Header.Set("Origin", "http://127.0.0.1:7071")
	if code, _ := (RequestPolicy{}).Check(r); code != "origin_refused" {
		t.Errorf("another port's origin: %q, want origin_refused", code)
	}
}

// must stops the test when a setup step fails: the checks after it would
// test the wrong thing.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
