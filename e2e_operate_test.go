package main_test

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestOperatingIt runs README's "Operating it" commands on a real
// 4-node cluster (scripts/cluster.sh, with a secret): ctl upgrade status
// shows one cluster version every member supports; ctl decommission of a
// live node moves its partitions away, makes it leave and removes it
// (and is refused once too few members would be left); ctl remove of a
// node killed for good refills its cohorts and forgets it. Every task
// enqueued before is still there.
func TestOperatingIt(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	cs := &clusterScript{t: t, bin: skulddBin(t), dir: t.TempDir(), base: freePorts(t, 4), secret: writeSecret(t, t.TempDir())}
	cs.must("up", "4")
	t.Cleanup(func() { _, _ = cs.run("down") })
	n1 := cs.node(1)
	for i := range 20 {
		n1.enqueue(t, "--queue", "op", "--data", strconv.Itoa(i))
	}
	idOf := func(i int) string {
		c, ok := n1.cluster(t)
		if !ok {
			t.Fatal("ctl cluster failed")
		}
		for _, m := range c.Members {
			if m.Addr == cs.node(i).addr && m.State == "alive" {
				return strconv.FormatUint(m.ID, 10)
			}
		}
		t.Fatalf("node %d is not an alive member", i)
		return ""
	}

	var st struct {
		ClusterVersion uint32 `json:"cluster_version"`
		Supported      uint32 `json:"supported"`
		Members        []struct {
			Supports uint32 `json:"supports"`
			Build    string `json:"build"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(n1.ok(t, "upgrade", "status")[0]), &st); err != nil {
		t.Fatal(err)
	}
	if st.ClusterVersion < 2 || st.Supported != st.ClusterVersion || len(st.Members) != 4 {
		t.Fatalf("ctl upgrade status: %+v", st)
	}

	// Decommission node 4: its partitions move, it leaves, it is removed.
	id4 := idOf(4)
	r := n1.ctl(t, "decommission", id4)
	if r.code != 0 || !strings.Contains(r.stdout, `"removed":true`) || !strings.Contains(r.stderr, "asking it to leave") {
		t.Fatalf("ctl decommission: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	poll(t, 30*time.Second, 100*time.Millisecond, "node 4's process exits", func() bool {
		out, _ := cs.run("status")
		return !strings.Contains(out, "node 4 running")
	})
	c, _ := n1.cluster(t)
	for _, p := range c.Partitions {
		if strings.Contains(" "+joinIDs(p.Cohort)+" ", " "+id4+" ") {
			t.Fatalf("partition %d's cohort %v still names the decommissioned node", p.Partition, p.Cohort)
		}
	}

	// Kill node 3 for good; ctl remove waits for its cohorts to be
	// refilled and forgets it. Refused while it is alive.
	id3 := idOf(3)
	if r := n1.ctl(t, "remove", id3); r.code == 0 || !strings.Contains(r.stderr, "is alive") {
		t.Fatalf("ctl remove of a live node: exit %d\n%s", r.code, r.stderr)
	}
	cs.must("kill", "3")
	poll(t, time.Minute, 200*time.Millisecond, "node 3 removed", func() bool {
		r := n1.ctl(t, "remove", id3)
		return r.code == 0 && strings.Contains(r.stdout, `"removed":true`)
	})
	// Two members left for three replicas: a decommission is refused.
	if r := n1.ctl(t, "decommission", idOf(2)); r.code == 0 || !strings.Contains(r.stderr, "add a node first") {
		t.Fatalf("ctl decommission leaving too few: exit %d\n%s", r.code, r.stderr)
	}
	if n := n1.count(t, "--queue", "op"); n != 20 {
		t.Fatalf("count after the decommission and the removal: %d; want 20", n)
	}
}

func joinIDs(ids []uint64) string {
	var s []string
	for _, id := range ids {
		s = append(s, strconv.FormatUint(id, 10))
	}
	return strings.Join(s, " ")
}
