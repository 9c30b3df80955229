package agent

import (
	"encoding/json"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
)

// The agent dials a real unix socket when asked, presents the token, and
// serves calls on the new connection.
func TestDirectDialServesCalls(t *testing.T) {
	p := newPair(t)
	path := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	token, err := agentclient.NewDirectToken()
	require.NoError(t, err)
	got := make(chan net.Conn, 1)
	go func() { nc, _ := agentclient.AcceptDirect(ctxT(t), ln, token); got <- nc }()
	require.NoError(t, p.cli.DialDirect(ctxT(t), path, token))
	nc := <-got
	require.NotNil(t, nc)
	direct := agentclient.NewClient(nc, agentclient.WithLogger(quiet))
	defer direct.Close()
	obs, err := direct.Call(ctxT(t), "echo", json.RawMessage(`{"text":"over the direct path"}`), nil)
	require.NoError(t, err)
	assert.Equal(t, "over the direct path", obs.Text())

	// The first connection is unaffected; the server's shutdown ends both.
	require.NoError(t, p.cli.Ping(ctxT(t)))
	require.NoError(t, p.srv.Close())
	<-direct.Done()
	require.ErrorIs(t, direct.Err(), proto.ErrDisconnected)
}

func TestDirectDialRefusesBadParams(t *testing.T) {
	p := newPair(t)
	token, err := agentclient.NewDirectToken()
	require.NoError(t, err)
	for name, tc := range map[string]struct{ path, token string }{
		"relative path": {"d.sock", token},
		"long path":     {"/" + string(make([]byte, maxDirectPath)), token},
		"short token":   {"/run/d.sock", token[:10]},
		"not hex":       {"/run/d.sock", "zz" + token[2:]},
	} {
		err := p.cli.DialDirect(ctxT(t), tc.path, tc.token)
		require.ErrorIs(t, err, proto.ErrInvalidParams, name)
	}
	err = p.cli.DialDirect(ctxT(t), filepath.Join(t.TempDir(), "none.sock"), token)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dialling", "a socket that is not there")
	require.NoError(t, p.cli.Ping(ctxT(t)), "the connection that asked is unaffected")
}
