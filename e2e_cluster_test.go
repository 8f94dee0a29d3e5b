package main_test

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// clusterScript runs scripts/cluster.sh with the test's binary, folder and
// ports.
type clusterScript struct {
	t    *testing.T
	bin  string
	dir  string
	base int
	// secret, if set, is the cluster secret file the nodes start with.
	secret string
}

func (cs *clusterScript) run(args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join("scripts", "cluster.sh")}, args...)...)
	cmd.Env = append(os.Environ(),
		"SKULD_BIN="+cs.bin,
		"SKULD_CLUSTER_DIR="+cs.dir,
		"SKULD_CLUSTER_PORT="+strconv.Itoa(cs.base),
		"SKULD_CLUSTER_WAIT=60",
	)
	if cs.secret != "" {
		cmd.Env = append(cmd.Env, "SKULD_CLUSTER_SECRET_FILE="+cs.secret)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (cs *clusterScript) must(args ...string) string {
	cs.t.Helper()
	out, err := cs.run(args...)
	if err != nil {
		cs.t.Fatalf("cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// node returns a ctl handle on node i (1-based).
func (cs *clusterScript) node(i int) *node {
	n := &node{bin: cs.bin, dir: filepath.Join(cs.dir, fmt.Sprintf("n%d", i)), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(cs.base+i-1)), out: &lockedBuffer{}}
	if cs.secret != "" {
		n.auth = []string{"--cluster-secret-file", cs.secret}
		n.tls = secretTLS(cs.t, n.auth)
	}
	return n
}

// freePorts returns the first of n consecutive ports free for UDP and TCP.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := freePort(t)
		ok := true
		for i := range n {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i))
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				ok = false
				break
			}
			l, err := net.Listen("tcp", addr)
			u.Close()
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

type clusterOut struct {
	Members []struct {
		ID    uint64 `json:"id,string"`
		Addr  string `json:"addr"`
		State string `json:"state"`
		Raft  string `json:"raft"`
	} `json:"members"`
	Raft struct {
		Leader uint64       `json:"leader,string"`
		Voters wire.NodeIDs `json:"voters"`
	} `json:"raft"`
	Partitions []struct {
		Partition int          `json:"partition"`
		Cohort    wire.NodeIDs `json:"cohort"`
		Leader    uint64       `json:"leader,string"`
		Epoch     uint64       `json:"epoch"`
	} `json:"partitions"`
}

func (n *node) cluster(t *testing.T) (clusterOut, bool) {
	t.Helper()
	var c clusterOut
	r, err := n.runErr(nil, "cluster")
	if err != nil || r.code != 0 {
		return c, false
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &c); err != nil {
		t.Fatalf("ctl cluster output %q: %v", r.stdout, err)
	}
	return c, true
}

func (c clusterOut) state(addr string) string {
	for _, m := range c.Members {
		if m.Addr == addr {
			return m.State
		}
	}
	return "absent"
}

// TestClusterScript runs a real 3-node cluster through scripts/cluster.sh:
// up, ctl through every node, kill -9 of a member, restart, down.
func TestClusterScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	cs := &clusterScript{t: t, bin: skulddBin(t), dir: t.TempDir(), base: freePorts(t, 3)}
	cs.must("up", "3")
	t.Cleanup(func() {
		if out, err := cs.run("down"); err != nil {
			t.Errorf("cluster.sh down: %v\n%s", err, out)
		}
		if t.Failed() {
			for i := 1; i <= 3; i++ {
				b, _ := os.ReadFile(filepath.Join(cs.dir, fmt.Sprintf("n%d.log", i)))
				t.Logf("node %d log:\n%s", i, b)
			}
		}
	})
	n1, n2, n3 := cs.node(1), cs.node(2), cs.node(3)
	poll(t, time.Minute, 50*time.Millisecond, "three alive members and three voters", func() bool {
		c, ok := n3.cluster(t)
		if !ok || len(c.Raft.Voters) != 3 || c.Raft.Leader == 0 {
			return false
		}
		for _, n := range []*node{n1, n2, n3} {
			if c.state(n.addr) != "alive" {
				return false
			}
		}
		return true
	})
	if out := cs.must("status"); strings.Count(out, "running healthy") != 3 {
		t.Fatalf("status:\n%s", out)
	}

	// Any node coordinates any request.
	const tasks = 20
	for i := range tasks {
		[]*node{n2, n3}[i%2].enqueue(t, "--queue", "sq", "--data", strconv.Itoa(i))
	}
	for i := range tasks {
		tk := []*node{n3, n2}[i%2].claim(t, "sq", "30s", "")
		[]*node{n1, n2, n3}[i%3].ok(t, "complete", "--id", tk.ID, "--claim", strconv.Itoa(int(*tk.Claim)))
	}
	n2.nothingToClaim(t, "sq")

	// kill -9 of a member: the others see it dead; it restarts and rejoins.
	cs.must("kill", "2")
	poll(t, time.Minute, 100*time.Millisecond, "node 2 seen dead", func() bool {
		c, ok := n1.cluster(t)
		return ok && c.state(n2.addr) == "dead"
	})
	// The survivors take over the partitions node 2 led: tasks enqueued
	// through them now are claimed and completed through them, each once.
	// While a partition's new leader is being chosen a request may be
	// refused as unavailable (exit 1): retry it.
	retry := func(n *node, what string, args ...string) []string {
		t.Helper()
		var lines []string
		poll(t, time.Minute, 50*time.Millisecond, what, func() bool {
			r, err := n.runErr(nil, args...)
			if err != nil {
				t.Fatal(err)
			}
			if r.code == 0 {
				lines = checkOK(t, r, args)
			}
			return r.code == 0
		})
		return lines
	}
	queued := map[string]bool{}
	for i := range tasks {
		var e enqueued
		decode(t, retry([]*node{n1, n3}[i%2], "an enqueue after the kill", "enqueue", "--queue", "sk", "--data", strconv.Itoa(i))[0], &e)
		queued[e.ID] = true
	}
	for range tasks {
		tk := decodeTask(t, retry(n3, "a claim after the kill", "claim", "--queue", "sk", "--ttl", "30s")[0])
		if !queued[tk.ID] {
			t.Fatalf("claim after the kill: task %s, not one enqueued and not completed", tk.ID)
		}
		delete(queued, tk.ID)
		retry(n1, "a complete after the kill", "complete", "--id", tk.ID, "--claim", strconv.Itoa(int(*tk.Claim)))
	}
	n1.nothingToClaim(t, "sk")

	cs.must("restart", "2")
	poll(t, time.Minute, 50*time.Millisecond, "node 2 alive again", func() bool {
		c, ok := n1.cluster(t)
		return ok && c.state(n2.addr) == "alive"
	})
	n2.ok(t, "count", "--queue", "sq")
	// Through the restarted node the cluster shows what happened while
	// it was down.
	var cnt struct{ Count int }
	decode(t, n2.ok(t, "count", "--queue", "sk")[0], &cnt)
	if cnt.Count != tasks {
		t.Fatalf("count of sk through the restarted node: %d; want %d", cnt.Count, tasks)
	}

	// ctl leave: node 3 hands off what it leads and stops; the others see
	// it left, and serve everything without it.
	placedAll := func() bool {
		c, ok := n1.cluster(t)
		if !ok || c.Raft.Leader == 0 {
			return false
		}
		for _, n := range []*node{n1, n2, n3} {
			if c.state(n.addr) != "alive" {
				return false
			}
		}
		return true
	}
	poll(t, time.Minute, 50*time.Millisecond, "three alive members before the leave", placedAll)
	var left struct {
		HandedOff *int `json:"handed_off"`
	}
	decode(t, n3.ok(t, "leave")[0], &left)
	if left.HandedOff == nil {
		t.Fatal("ctl leave printed no handed_off")
	}
	poll(t, time.Minute, 100*time.Millisecond, "node 3 stopped after ctl leave", func() bool {
		return strings.HasSuffix(lastLine(cs.must("status")), " stopped") // node 3 is the last line
	})
	poll(t, time.Minute, 100*time.Millisecond, "node 3 seen left", func() bool {
		c, ok := n1.cluster(t)
		return ok && c.state(n3.addr) == "left"
	})
	id := n1.enqueue(t, "--queue", "after-leave", "--data", "x")
	tk := decodeTask(t, retry(n2, "a claim after the leave", "claim", "--queue", "after-leave", "--ttl", "30s")[0])
	if tk.ID != id {
		t.Fatalf("claim after the leave: task %s; want %s", tk.ID, id)
	}
	decode(t, n1.ok(t, "count", "--queue", "sq")[0], &cnt)
	if cnt.Count != tasks {
		t.Fatalf("count of sq after node 3 left: %d; want %d", cnt.Count, tasks)
	}
}

// lastLine returns s's last non-empty line.
// writeSecret writes a cluster secret file, readable by its owner only,
// in dir and returns its path.
func writeSecret(t *testing.T, dir string) string {
	t.Helper()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return secret
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestSecretCtl: with a cluster secret, ctl needs the token (derived from
// the secret file, or given), and HTTP is HTTPS (the certificate signed
// by the authority the secret derives, which ctl tls-ca prints and ctl
// ready checks) and needs the token as a bearer token.
func TestSecretCtl(t *testing.T) {
	dir := t.TempDir()
	secret := writeSecret(t, dir)
	n := startNode(t, filepath.Join(dir, "data"), 0, "--cluster-secret-file", secret)
	defer n.stop(t)

	r := n.ctl(t, "count")
	if r.code != 1 || !strings.Contains(r.stderr, "authentication") {
		t.Fatalf("ctl without a token: %v; want exit 1 saying authentication", r)
	}
	n.ok(t, "--cluster-secret-file", secret, "count")
	var tok struct{ Token string }
	lines := n.ok(t, "token", "--cluster-secret-file", secret)
	decode(t, lines[0], &tok)
	if len(tok.Token) != 64 {
		t.Fatalf("token %q", tok.Token)
	}
	n.ok(t, "--token", tok.Token, "count")
	// The token from the environment, as a service's env file gives it.
	t.Setenv("SKULD_TOKEN", tok.Token)
	n.ok(t, "count")
	t.Setenv("SKULD_TOKEN", strings.Repeat("0", 64))
	if r := n.ctl(t, "count"); r.code != 1 || !strings.Contains(r.stderr, "authentication") {
		t.Fatalf("ctl with a wrong SKULD_TOKEN: %v; want exit 1 saying authentication", r)
	}
	os.Unsetenv("SKULD_TOKEN")
	if r := n.ctl(t, "--token", strings.Repeat("0", 64), "count"); r.code != 1 {
		t.Fatalf("ctl with a wrong token: %v; want exit 1", r)
	}
	if r := n.ctl(t, "--token", "nothex", "count"); r.code != 2 {
		t.Fatalf("ctl with a malformed token: %v; want exit 2", r)
	}

	hc := n.httpClient(5 * time.Second)
	defer hc.CloseIdleConnections()
	get := func(auth string) int {
		req, err := http.NewRequest("GET", n.url("/v1/count"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(""); c != http.StatusUnauthorized {
		t.Fatalf("HTTP without token: %d", c)
	}
	if c := get("Bearer " + tok.Token); c != http.StatusOK {
		t.Fatalf("HTTP with token: %d", c)
	}

	// curl's view: the authority ctl tls-ca prints verifies the node's
	// certificate for its address; the pin names its key.
	caFile := filepath.Join(dir, "ca.pem")
	ca := n.run(t, nil, "tls-ca", "--cluster-secret-file", secret)
	if ca.code != 0 || !strings.HasPrefix(ca.stdout, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("ctl tls-ca: %v", ca)
	}
	if err := os.WriteFile(caFile, []byte(ca.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(ca.stdout))
	conn, err := tls.Dial("tcp", n.addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS with the authority ctl tls-ca printed: %v", err)
	}
	spki, err := x509.MarshalPKIXPublicKey(conn.ConnectionState().PeerCertificates[0].PublicKey)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	pin := n.run(t, nil, "tls-ca", "--pin", "--cluster-secret-file", secret)
	if want := "sha256//" + base64.StdEncoding.EncodeToString(sum[:]); strings.TrimSpace(pin.stdout) != want {
		t.Fatalf("ctl tls-ca --pin: %v; want %s", pin, want)
	}
	// ctl ready: over HTTPS with the secret (and --cacert), refused for
	// plain HTTP with a message that says so.
	for _, args := range [][]string{{"--cluster-secret-file", secret}, {"--cacert", caFile}} {
		if r := n.ctl(t, append([]string{"ready"}, args...)...); r.code != 0 || !strings.Contains(r.stdout, `"status":"ready"`) {
			t.Fatalf("ctl ready %v: %v", args, r)
		}
	}
	if r := n.ctl(t, "ready"); r.code != 1 || !strings.Contains(r.stdout, "HTTPS") {
		t.Fatalf("ctl ready over plain HTTP to an HTTPS port: %v; want exit 1 saying HTTPS", r)
	}

	// Credentials: the admin makes a reader; the reader reads over QUIC
	// and HTTPS and is refused an enqueue (exit 1, saying why) and the
	// credentials; revoked, it is refused everything.
	var created struct{ Name, Role, Token string }
	decode(t, n.ok(t, "--cluster-secret-file", secret, "auth", "create", "dash", "--role", "reader")[0], &created)
	if created.Role != "reader" || !strings.HasPrefix(created.Token, "skuld_") {
		t.Fatalf("auth create: %+v", created)
	}
	if r := n.ctl(t, "--cluster-secret-file", secret, "auth", "create", "dash", "--role", "reader"); r.code != 1 || !strings.Contains(r.stderr, "a credential named dash exists") || strings.Count(r.stderr, "invalid") > 1 {
		t.Fatalf("auth create of a taken name: %v; want exit 1 saying it exists, once", r)
	}
	if lines := n.ok(t, "--cluster-secret-file", secret, "auth", "list"); len(lines) != 1 || !strings.Contains(lines[0], `"name":"dash"`) || strings.Contains(lines[0], "skuld_") {
		t.Fatalf("auth list: %q; want dash, no token", lines)
	}
	n.ok(t, "--token", created.Token, "count")
	if r := n.ctl(t, "--token", created.Token, "enqueue", "--queue", "q"); r.code != 1 || !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("a reader's enqueue: %v; want exit 1, forbidden", r)
	}
	if r := n.ctl(t, "--token", created.Token, "auth", "list"); r.code != 1 || !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("a reader's auth list: %v; want exit 1, forbidden", r)
	}
	if c := get("Bearer " + created.Token); c != http.StatusOK {
		t.Fatalf("HTTPS with the reader's token: %d", c)
	}
	n.ok(t, "--cluster-secret-file", secret, "auth", "revoke", "dash")
	if c := get("Bearer " + created.Token); c != http.StatusUnauthorized {
		t.Fatalf("HTTPS with a revoked token: %d; want 401", c)
	}
	if r := n.ctl(t, "--token", created.Token, "count"); r.code != 1 || !strings.Contains(r.stderr, "authentication") {
		t.Fatalf("ctl with a revoked token: %v; want exit 1 saying authentication", r)
	}
}
