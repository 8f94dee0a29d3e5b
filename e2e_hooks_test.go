package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestTestBuildHooks: the test build (tag skuldtest) serves the fault
// suite's hooks, and the production build does not. The crash hook loses
// nothing that was acknowledged: a node crashed through it comes back
// with every task it had acknowledged.
func TestTestBuildHooks(t *testing.T) {
	bin := skulddTestBin(t)
	dir := t.TempDir()
	// startNodeBin picks another port if the one it chose was taken
	// meanwhile (by the tests of other packages running alongside).
	n := startNodeBin(t, bin, dir, 0)
	base := "http://" + n.addr

	var clk struct {
		OffsetMs int64 `json:"offset_ms"`
	}
	hookJSON(t, "POST", base+"/debug/clock", `{"offset_ms": 1234}`, &clk)
	hookJSON(t, "GET", base+"/debug/clock", "", &clk)
	if clk.OffsetMs != 1234 {
		t.Fatalf("clock offset %d after setting 1234", clk.OffsetMs)
	}
	var reps struct {
		Node       uint64 `json:"node"`
		Partitions []struct {
			Partition    int    `json:"partition"`
			LeadingEpoch uint64 `json:"leading_epoch"`
			Root         string `json:"root"`
		} `json:"partitions"`
	}
	hookJSON(t, "GET", base+"/debug/replicas", "", &reps)
	if reps.Node == 0 || len(reps.Partitions) != 64 || reps.Partitions[0].LeadingEpoch == 0 || reps.Partitions[0].Root == "" {
		t.Fatalf("replicas: %+v", reps)
	}

	var ids []string
	for i := range 50 {
		var resp struct {
			ID string `json:"id"`
		}
		hookJSON(t, "POST", base+"/v1/tasks", fmt.Sprintf(`{"queue":"q","data":%s}`, b64(fmt.Sprint("task ", i))), &resp)
		ids = append(ids, resp.ID)
	}
	req, _ := http.NewRequest("POST", base+"/debug/crash", strings.NewReader(`{"lose_unsynced": true}`))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not exit after the crash hook")
	}
	var ee *exec.ExitError
	if !errors.As(n.waitErr, &ee) || ee.ExitCode() != 137 {
		t.Fatalf("exit after the crash hook: %v; want status 137", n.waitErr)
	}
	n = startNodeBin(t, bin, dir, 0)
	for _, id := range ids {
		hookJSON(t, "GET", "http://"+n.addr+"/v1/tasks/"+id, "", &struct{}{})
	}

	prod := startNodeBin(t, skulddBin(t), t.TempDir(), 0)
	resp, err := http.Get("http://" + prod.addr + "/debug/clock")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("production build: /debug/clock answered %s; want 404", resp.Status)
	}
}

// hookJSON sends a request and decodes a 200 answer into out.
func hookJSON(t *testing.T, method, url, body string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s %s", method, url, resp.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %v in %s", method, url, err, b)
	}
}
