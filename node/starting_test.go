package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
)

// TestHTTPAnswersWhileStarting: a node's HTTP port answers from the
// moment it is bound. While the node is still starting (here it waits to
// join through an address nobody serves) /readyz says it is starting,
// /healthz that it is alive and starting, and a client op is refused at once with a 503, which a client can retry
// elsewhere. Before, the port was bound at once but served only once the
// start ended: a request waited in the kernel's backlog for the whole
// start, up to its deadline (the fault suite saw enqueues to a restarted
// node time out so).
func TestHTTPAnswersWhileStarting(t *testing.T) {
	c := nodetest.NewCluster(t, 1)
	cfg := c.Config(0)
	c.Stop(0)
	cfg.DataDir = t.TempDir() // a new node, which must join
	cfg.Join = []string{"127.0.0.1:1"}
	cfg.StartTimeout = 3 * time.Second
	hc := &http.Client{Timeout: time.Second}
	get := func(method, path, body string) (int, string, error) {
		req, err := http.NewRequest(method, "http://"+cfg.Bind+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	var started chan error
	// A port free for TCP now may be taken for UDP, or by then: a start
	// that fails to bind is tried again on another.
	for try := 1; ; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Bind = ln.Addr().String()
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		n, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		started = make(chan error, 1)
		go func() { started <- n.Start(context.Background()) }()
		t.Cleanup(func() { _ = n.Close() })
		// Until the node binds, the port refuses; from then on it
		// answers.
		answered := false
		for !answered {
			code, body, err := get(http.MethodGet, "/readyz", "")
			if errors.Is(err, syscall.ECONNREFUSED) {
				select {
				case err := <-started:
					if try < 3 && strings.Contains(fmt.Sprint(err), "address already in use") {
						break
					}
					t.Fatalf("the start ended (%v) before the port answered", err)
				case <-time.After(10 * time.Millisecond):
					continue
				}
				break // try another port
			}
			if err != nil {
				t.Fatalf("GET /readyz while starting: %v; want an answer at once", err)
			}
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
				t.Fatalf("GET /readyz while starting: %d %s; want 503, starting", code, body)
			}
			if code, body, err := get(http.MethodGet, "/healthz", ""); err != nil || code != http.StatusOK || !strings.Contains(body, "starting") {
				t.Fatalf("GET /healthz while starting: %d %s %v; want 200 (alive), starting", code, body, err)
			}
			answered = true
		}
		if answered {
			break
		}
	}
	code, body, err := get(http.MethodPost, "/v1/enqueue", `{"tasks":[{"queue":"q"}]}`)
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Fatalf("enqueue while starting: %d %s %v; want 503, starting", code, body, err)
	}
	select {
	case err := <-started:
		t.Fatalf("the start ended (%v) before the checks did: they proved nothing", err)
	default:
	}
	if err := <-started; err == nil {
		t.Fatal("a node joining through an address nobody serves started")
	}
}
