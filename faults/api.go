package faults

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// API is an HTTP client of the cluster's nodes. Safe for concurrent use.
type API struct {
	hc     *http.Client
	scheme string
	addrs  []string
	auth   string
}

// maxResponse bounds a response body the harness reads: a task view or a
// cluster view is kilobytes; a node's replica list of 16 partitions too.
const maxResponse = 8 << 20

// Connection settings of the client. apiIdleConns is how many idle
// connections it keeps per node (each process has one client loop, the
// harness up to FinalReaders readers); apiDialTimeout bounds a connect,
// which on the bridge takes well under a millisecond unless the node's
// namespace is gone; apiIdleTimeout drops connections left idle by a
// node that was killed meanwhile.
const (
	apiIdleConns   = 16
	apiDialTimeout = 2 * time.Second
	apiIdleTimeout = 30 * time.Second
)

// NewAPI returns a client of the nodes at addrs (node i at addrs[i-1],
// host:port) proving token, over HTTPS trusting the authority caPEM (a
// cluster with a secret: skuldd ctl tls-ca), else over plain HTTP (nil).
// local, if valid, is the source address of every connection (the
// harness's address on the bridge, which no partition ever cuts).
func NewAPI(addrs []string, token string, caPEM []byte, local netip.Addr) *API {
	d := &net.Dialer{Timeout: apiDialTimeout}
	if local.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	tr := &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConnsPerHost: apiIdleConns,
		IdleConnTimeout:     apiIdleTimeout,
		DisableCompression:  true,
	}
	a := &API{hc: &http.Client{Transport: tr}, scheme: "http", addrs: addrs}
	if caPEM != nil {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(caPEM) {
			// A bug in the harness (ctl tls-ca printed no PEM), not an
			// outcome.
			panic("faults: no certificate in the cluster's authority PEM")
		}
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
		a.scheme = "https"
	}
	if token != "" {
		a.auth = "Bearer " + token
	}
	return a
}

// As returns a client of the same nodes, over the same connections,
// proving token instead.
func (a *API) As(token string) *API {
	b := *a
	b.auth = "Bearer " + token
	return &b
}

// Nodes returns the number of nodes.
func (a *API) Nodes() int { return len(a.addrs) }

// Close drops the idle connections.
func (a *API) Close() { a.hc.CloseIdleConnections() }

// Result is the outcome of one request, classified as the history needs
// it (history.go, "Outcomes").
type Result struct {
	// Type is OK, Fail or Info.
	Type   string
	Status int
	// Code is skuldd's error code, or for a transport failure a short
	// name of it (conn_refused, timeout, conn_error).
	Code string
	Err  string
	Body []byte
}

// Read reports whether the request came back ok with an answer that
// decoded: what a caller that uses the answer needs. (An ok that did not
// decode took effect; the history records it as such, with its code.)
func (r Result) Read() bool { return r.Type == OK && r.Code != CodeBadResponse }

// errorBody is skuldd's JSON error.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Do sends method path to node (1-based) with body (JSON, unless nil) and
// classifies the answer. On OK, out (if not nil) receives the decoded
// body. 2xx is ok; 4xx a definite refusal (fail); 5xx and every transport
// failure, including a refused connection, are info: the brief of the
// suite counts a connection error as an unknown outcome.
func (a *API) Do(ctx context.Context, node int, method, path string, body, out any) Result {
	if node < 1 || node > len(a.addrs) {
		return Result{Type: Info, Code: "no_node", Err: fmt.Sprintf("no node %d", node)}
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			// A bug in the harness, not an outcome.
			panic(fmt.Sprintf("faults: encode request body: %v", err))
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.scheme+"://"+a.addrs[node-1]+path, rd)
	if err != nil {
		panic(fmt.Sprintf("faults: build request: %v", err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.auth != "" {
		req.Header.Set("Authorization", a.auth)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return Result{Type: Info, Code: transportCode(err), Err: err.Error()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return Result{Type: Info, Status: resp.StatusCode, Code: transportCode(err), Err: "read body: " + err.Error()}
	}
	r := Result{Status: resp.StatusCode, Body: b}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		r.Type = OK
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				// The node acknowledged (ok: it took effect), but what it
				// said is unreadable: the checkers flag it (history.go).
				r.Code, r.Err = CodeBadResponse, fmt.Sprintf("decode %s answer: %v", path, err)
			}
		}
		return r
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		r.Type = Fail
	default:
		r.Type = Info
	}
	var eb errorBody
	if json.Unmarshal(b, &eb) == nil && eb.Code != "" {
		r.Code, r.Err = eb.Code, eb.Error
	} else {
		r.Code, r.Err = fmt.Sprintf("http_%d", resp.StatusCode), string(truncateBytes(b, 200))
	}
	return r
}

// transportCode names a transport failure.
func transportCode(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "conn_refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "conn_error"
}

func truncateBytes(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return b[:n]
}
