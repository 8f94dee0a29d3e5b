package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/skuldd/skuldd/wire"
)

// ctlTLSCACommand prints the HTTPS authority a cluster secret derives.
func ctlTLSCACommand() *ucli.Command {
	return &ucli.Command{
		Name:  "tls-ca",
		Usage: "print the HTTPS certificate authority derived from --cluster-secret-file, PEM (for curl --cacert, a browser, an HTTP client); --pin: the public-key pin of every node certificate the nodes make (curl --pinnedpubkey)",
		Flags: []ucli.Flag{authFlags()[0], &ucli.BoolFlag{Name: "pin", Usage: "print the nodes' public-key pin instead"}},
		Action: func(c *ucli.Context) error {
			id, err := httpsIdentity(c)
			if err != nil {
				return err
			}
			if id == nil {
				return usagef("tls-ca: missing --cluster-secret-file")
			}
			if c.Bool("pin") {
				pin, err := id.Pin()
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(c.App.Writer, pin)
				return err
			}
			_, err = c.App.Writer.Write(id.CAPEM())
			return err
		},
	}
}

// ctlReadyCommand asks each node of --addr whether it is ready (GET
// /readyz on its HTTP port), as a load balancer or a script would.
func ctlReadyCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "ready",
		Usage: "ask each node of --addr whether it is ready (its /readyz); prints {addr, status, reasons} per node and fails unless every one is ready. HTTPS with --cluster-secret-file (the node's certificate checked against the secret's authority), --https or --cacert",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "https", Usage: "use HTTPS without a cluster secret (a node with --tls-cert)"},
			&ucli.StringFlag{Name: "cacert", Usage: "PEM file of a certificate authority to trust besides the system's (and the secret's)"},
		},
		Action: ctlReady,
	}
}

// readyAnswer is one node's line of ctl ready.
type readyAnswer struct {
	Addr    string   `json:"addr"`
	Status  string   `json:"status"`
	Reasons []string `json:"reasons,omitempty"`
}

func ctlReady(c *ucli.Context) error {
	client, scheme, err := httpClient(c)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	out, err := newPrinter(c, c.App.Writer)
	if err != nil {
		return err
	}
	notReady := 0
	for _, addr := range strings.Split(c.String("addr"), ",") {
		a := readyAnswer{Addr: addr}
		if err := getReady(c.Context, client, scheme+"://"+addr+"/readyz", c.Duration("timeout"), &a); err != nil {
			a.Status, a.Reasons = "unreachable", []string{err.Error()}
		}
		if a.Status != "ready" {
			notReady++
		}
		if err := out.Encode(&a); err != nil {
			return err
		}
	}
	if notReady > 0 {
		return fmt.Errorf("%d of the nodes asked are not ready", notReady)
	}
	return nil
}

// getReady reads a node's /readyz into a (its status and reasons; a 503
// is an answer, not an error).
func getReady(ctx context.Context, client *http.Client, url string, timeout time.Duration, a *readyAnswer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) {
			return fmt.Errorf("%w (a node of another cluster, or one with --tls-cert: give --cacert)", err)
		}
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, a); err != nil || a.Status == "" {
		if resp.StatusCode == http.StatusBadRequest && strings.Contains(string(body), "HTTPS") {
			return errors.New("the node serves HTTPS: give --cluster-secret-file (or --cacert, --https)")
		}
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// httpClient is an HTTP client of a node's HTTP port, and its scheme:
// HTTPS with a cluster secret (trusting the secret's authority), --https
// or --cacert (trusting the system's authorities and --cacert's too),
// else plain HTTP.
func httpClient(c *ucli.Context) (*http.Client, string, error) {
	id, err := httpsIdentity(c)
	if err != nil {
		return nil, "", err
	}
	if id == nil && !c.Bool("https") && c.String("cacert") == "" {
		return &http.Client{Transport: &http.Transport{}}, "http", nil
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if id != nil {
		roots.AppendCertsFromPEM(id.CAPEM())
	}
	if f := c.String("cacert"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, "", usageError{fmt.Errorf("--cacert: %w", err)}
		}
		if !roots.AppendCertsFromPEM(b) {
			return nil, "", usagef("--cacert %s: no PEM certificate in it", f)
		}
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}}
	return &http.Client{Transport: tr}, "https", nil
}

// httpsIdentity is the HTTPS authority --cluster-secret-file derives; nil
// without the flag.
func httpsIdentity(c *ucli.Context) (*wire.HTTPSIdentity, error) {
	f := c.String("cluster-secret-file")
	if f == "" {
		return nil, nil
	}
	secret, err := readSecret(f)
	if err != nil {
		return nil, usageError{err}
	}
	return wire.DeriveHTTPS(secret)
}
