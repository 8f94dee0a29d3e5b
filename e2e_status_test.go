package main_test

// The status page in a real browser: headless Chromium (chromedp) against
// a 3-node cluster with a secret, run through scripts/cluster.sh.

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// screenshotDirEnv names a directory the status page test saves its
// screenshots in (docs/ holds the ones README shows); unset, they go to
// the test's temporary directory.
const screenshotDirEnv = "SKULDD_SCREENSHOT_DIR"

// requireBrowserEnv, set, makes the status page test fail rather than
// skip without Chromium (.ci/run sets it, having installed it).
const requireBrowserEnv = "SKULDD_REQUIRE_BROWSER"

// chromium finds a Chromium or Chrome binary ("" if none).
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestStatusPage loads GET / of node 1 of a 3-node cluster with a secret
// in headless Chromium and checks what it shows: the three members
// alive, the metadata group, the queues with their counts and the age of
// the oldest ready task, a dead task with its failure's reason, and a
// task looked up by id. Without the token the page is refused with a
// Basic challenge (a browser's login prompt). On a phone-sized screen the
// page does not scroll sideways. After kill -9 of node 3 the page shows
// it dead; after node 2's too, it shows node 1 not ready and why, and
// still shows what it can read.
func TestStatusPage(t *testing.T) {
	chrome := chromium()
	if chrome == "" {
		if os.Getenv(requireBrowserEnv) != "" {
			t.Fatalf("%s is set and no Chromium is installed", requireBrowserEnv)
		}
		t.Skip("no Chromium here (Debian: apt-get install chromium; .ci/run installs it): the status page is not tested in a browser")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	shots := os.Getenv(screenshotDirEnv)
	if shots == "" {
		shots = t.TempDir()
	}
	dir := t.TempDir()
	secret := writeSecret(t, dir)
	cs := &clusterScript{t: t, bin: skulddBin(t), dir: dir, base: freePorts(t, 3), secret: secret}
	cs.must("up", "3")
	t.Cleanup(func() {
		if out, err := cs.run("down"); err != nil {
			t.Errorf("cluster.sh down: %v\n%s", err, out)
		}
	})
	n1, n2, n3 := cs.node(1), cs.node(2), cs.node(3)
	auth := []string{"--cluster-secret-file", secret}
	poll(t, time.Minute, 100*time.Millisecond, "three alive members and voters", func() bool {
		r, err := n1.runErr(nil, append(auth, "cluster")...)
		return err == nil && r.code == 0 && strings.Count(r.stdout, `"state":"alive"`) == 3 && strings.Count(r.stdout, `"raft":"voter"`) == 3
	})
	// Placed: every partition's cohort has all three nodes (the page then
	// shows what a cluster in service looks like).
	full := regexp.MustCompile(`"cohort":\["[0-9]+","[0-9]+","[0-9]+"\]`)
	poll(t, time.Minute, 200*time.Millisecond, "every cohort of three", func() bool {
		r, err := n1.runErr(nil, append(auth, "cluster")...)
		return err == nil && r.code == 0 && len(full.FindAllString(r.stdout, -1)) == strings.Count(r.stdout, `"cohort":`)
	})
	for i := range 5 {
		n1.enqueue(t, append(auth, "--queue", "mail", "--data", "message "+string(rune('a'+i)))...)
	}
	deadID := n2.enqueue(t, append(auth, "--queue", "sms", "--data", "+15550100", "--max-attempts", "1")...)
	tk := decodeTask(t, n2.ok(t, append(auth, "claim", "--queue", "sms")...)[0])
	n2.ok(t, append(auth, "fail", "--id", tk.ID, "--claim", "0", "--reason", "carrier rejected the number")...)
	if tk.ID != deadID {
		t.Fatalf("claimed %s; want %s", tk.ID, deadID)
	}
	r, err := runBinary(cs.bin, nil, "ctl", "token", "--raw", "--cluster-secret-file", secret)
	if err != nil || r.code != 0 {
		t.Fatalf("ctl token: %v %v", r, err)
	}
	token := strings.TrimSpace(r.stdout)
	page := n1.url("/")
	// The browser trusts the nodes' key by its pin, as an operator's
	// browser would once told to (ctl tls-ca --pin; importing ctl tls-ca's
	// authority works as well).
	r, err = runBinary(cs.bin, nil, "ctl", "tls-ca", "--pin", "--cluster-secret-file", secret)
	if err != nil || r.code != 0 || !strings.HasPrefix(r.stdout, "sha256//") {
		t.Fatalf("ctl tls-ca --pin: %v %v", r, err)
	}
	pin := strings.TrimPrefix(strings.TrimSpace(r.stdout), "sha256//")

	// Without the token: 401, with a Basic challenge a browser prompts for.
	hc := n1.httpClient(10 * time.Second)
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(strings.Join(resp.Header.Values("WWW-Authenticate"), ";"), "Basic") {
		t.Fatalf("status page without the token: %s %v; want 401 with a Basic challenge", resp.Status, resp.Header.Values("WWW-Authenticate"))
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1200, 1000), chromedp.Flag("ignore-certificate-errors-spki-list", pin))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	_, err = chromedp.Call(bctx, network.Enable, network.EnableParams{})
	must("network", err)
	_, err = chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + token}})
	must("set the token", err)
	// load opens url and waits for the page.
	load := func(url string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		must("load "+url, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("header"))))
	}
	// text is the visible text of the element sel matches ("" if none).
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector(`+strconv.Quote(sel)+`) || {innerText: ""}).innerText`))
		must("text of "+sel, err)
		return s
	}
	// read loads url and returns the text of each section (by id).
	read := func(url string, ids ...string) map[string]string {
		t.Helper()
		load(url)
		out := map[string]string{}
		for _, id := range ids {
			out[id] = text("#" + id)
		}
		return out
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		must("screenshot", err)
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	s := read(page+"?task="+deadID, "readiness", "members", "queues", "dead", "task", "partitions")
	for _, want := range []struct{ section, text string }{
		{"readiness", "ready"},
		{"members", n1.addr}, {"members", n2.addr}, {"members", n3.addr}, {"members", "leader"},
		{"queues", "mail"}, {"queues", "sms"},
		{"dead", deadID}, {"dead", "carrier rejected the number"},
		{"task", deadID}, {"task", "dead"}, {"task", "+15550100"}, {"task", "carrier rejected the number"},
		{"partitions", "63"},
	} {
		if !strings.Contains(s[want.section], want.text) {
			t.Errorf("section %s does not show %q:\n%s", want.section, want.text, s[want.section])
		}
	}
	if strings.Count(s["members"], "alive") != 3 {
		t.Errorf("members: want three alive:\n%s", s["members"])
	}
	// The mail queue's row: 5 ready, and an oldest ready age.
	row := text(`tr[data-queue="mail"]`)
	if f := strings.Fields(row); len(f) != 11 || f[1] != "5" || !strings.HasSuffix(f[10], "s") {
		t.Errorf("mail's row %q; want 5 ready and the oldest ready age last", row)
	}
	shot("status.png")

	// A phone: the page fits the width; wide tables scroll in their box.
	must("phone", chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2))))
	load(page)
	fits, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	must("width", err)
	if !fits {
		t.Error("on a 390-pixel-wide screen the page scrolls sideways")
	}
	shot("status-phone.png")
	must("desktop", chromedp.Do(bctx, chromedp.EmulateViewport(1200, 1000)))

	// kill -9 of node 3: the page shows it dead.
	cs.must("kill", "3")
	poll(t, time.Minute, 500*time.Millisecond, "node 3 shown dead", func() bool {
		load(page)
		return strings.Contains(text(`tr[data-addr="`+n3.addr+`"]`), "dead")
	})
	shot("status-node-killed.png")

	// And node 2: node 1 alone is not ready, says why, and the sections
	// it cannot read say so; the members still show.
	cs.must("kill", "2")
	var last map[string]string
	poll(t, time.Minute, 500*time.Millisecond, "node 1 shown not ready, node 2 dead", func() bool {
		last = read(page, "readiness", "reasons", "members", "queues")
		return strings.Contains(last["readiness"], "not ready") && strings.Contains(last["reasons"], "metadata group") &&
			strings.Contains(text(`tr[data-addr="`+n2.addr+`"]`), "dead")
	})
	// The queues read what this node leads (here, after the start, every
	// partition): they still show, or say why not.
	if !strings.Contains(last["members"], n1.addr) || !strings.Contains(last["queues"], "mail") && !strings.Contains(last["queues"], "unavailable") {
		t.Errorf("with two nodes down: members %q, queues %q; want the members, and the queues or why they cannot be read", last["members"], last["queues"])
	}
	shot("status-quorum-lost.png")
}
