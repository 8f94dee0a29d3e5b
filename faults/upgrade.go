package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// Upgrade mode (README: Operating it, Upgrades): the cluster starts on an
// older build (Config.OldBinary, built by scripts/faults.sh --upgrade
// from the commit faults/upgrade-from names), and the faults phase
// replaces its nodes with this build one at a time, between the steps of
// the usual schedule and under the workload: each node is stopped with
// SIGTERM, as systemd restarts a service, and started again from the
// same data dir with this build and --upgrade-hold. The nodes then run
// mixed for a step, and `skuldd ctl upgrade finalize` raises the cluster
// version; the steps left run on the new version. upgrade.json records
// what was done, and the "upgrade" check fails a run whose upgrade did
// not complete (a node not replaced, a finalize refused, a cluster
// version other than every member's).

// UpgradeFile is the upgrade's record in a run directory.
const UpgradeFile = "upgrade.json"

// UpgradeRecord is what upgrade mode did.
type UpgradeRecord struct {
	// From is the older build's --version line and file name
	// (scripts/faults.sh names it after its commit).
	From string `json:"from"`
	// Upgraded lists each node replaced, when, after which step.
	Upgraded []NodeUpgrade `json:"upgraded"`
	// Finalized: ctl upgrade finalize succeeded (FinalizeTNs, its
	// answer); FinalizeErr says why not.
	Finalized   bool                `json:"finalized"`
	FinalizeTNs int64               `json:"finalize_tns,omitempty"`
	Finalize    *wire.UpgradeStatus `json:"finalize,omitempty"`
	FinalizeErr string              `json:"finalize_error,omitempty"`
	// Status is ctl upgrade status at the end of the run.
	Status    *wire.UpgradeStatus `json:"status,omitempty"`
	StatusErr string              `json:"status_error,omitempty"`
}

// NodeUpgrade is one node's replacement.
type NodeUpgrade struct {
	Node      int    `json:"node"`
	AfterStep int    `json:"after_step"`
	TNs       int64  `json:"tns"`
	Err       string `json:"error,omitempty"`
}

// upgradePlan spreads the upgrades of nodes over the first half of a
// schedule of steps: after[k] are the nodes upgraded, one at a time,
// after step k (0-based); the finalize comes after step finalize, one
// step past the last upgrade (the nodes run mixed through it), or after
// the last step when the schedule is too short for that.
func upgradePlan(steps, nodes int) (after map[int][]int, finalize int) {
	after = make(map[int][]int)
	if steps <= 0 {
		return after, -1
	}
	last := 0
	for i := 1; i <= nodes; i++ {
		k := min(steps-1, i*steps/(2*nodes))
		after[k] = append(after[k], i)
		last = max(last, k)
	}
	return after, min(steps-1, last+1)
}

// upgradeNode replaces node i's build with this one: SIGTERM, then a
// start from the same data dir with cfg.Binary and --upgrade-hold, and a
// wait until it answers.
func (r *Run) upgradeNode(ctx context.Context, i, afterStep int) {
	rec := NodeUpgrade{Node: i, AfterStep: afterStep + 1, TNs: r.tl.Now()}
	defer func() { r.upgrade.Upgraded = append(r.upgrade.Upgraded, rec) }()
	p := r.nodes[i-1]
	if err := p.Term(r.cfg.StopGrace); err != nil && !errors.Is(err, ErrNotRunning) {
		r.log.Warn("upgrade: node did not stop cleanly", "node", i, "err", err)
	}
	r.upgraded[i] = true
	argv := p.Args()
	argv[binaryArg] = r.cfg.Binary
	p.SetArgv(append(argv, upgradeHoldFlag))
	if err := r.restart([]int{i}); err != nil {
		rec.Err = oneLine(err)
		r.note(NoteHealFailed, []int{i}, map[string]any{"upgrade": rec.Err})
		return
	}
	if err := r.waitAnswers(ctx, i, nodeStartBound); err != nil {
		rec.Err = oneLine(err)
	}
	r.log.Info("upgrade: node runs this build", "node", i, "after_step", afterStep+1)
}

// upgradeHoldFlag keeps the cluster version until the finalize, as an
// operator who may roll back runs the new build.
const upgradeHoldFlag = "--upgrade-hold"

// upgradeBound bounds ctl upgrade finalize and status: a member may be
// restarting from the step before.
const upgradeBound = 30 * time.Second

// ctlUpgrade runs `skuldd ctl upgrade VERB` (this build) through the
// nodes in turn until one answers, within upgradeBound.
func (r *Run) ctlUpgrade(ctx context.Context, verb string) (*wire.UpgradeStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, upgradeBound)
	defer cancel()
	var addrs []string
	for i := 1; i <= r.cfg.Topology.Nodes; i++ {
		addrs = append(addrs, r.cfg.Topology.NodeAddr(i).String())
	}
	var last error
	for {
		out, err := exec.CommandContext(ctx, r.cfg.Binary, "ctl", "--addr", strings.Join(addrs, ","),
			"--cluster-secret-file", r.secretPath, "upgrade", verb).Output()
		if err == nil {
			st := new(wire.UpgradeStatus)
			if err := json.Unmarshal(out, st); err != nil {
				return nil, fmt.Errorf("ctl upgrade %s: unexpected output %q", verb, strings.TrimSpace(string(out)))
			}
			return st, nil
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		last = err
		if sleepCtx(ctx, readyPoll) != nil {
			return nil, fmt.Errorf("ctl upgrade %s: %w", verb, last)
		}
	}
}

// finalizeUpgrade raises the cluster version with ctl upgrade finalize.
func (r *Run) finalizeUpgrade(ctx context.Context) {
	st, err := r.ctlUpgrade(ctx, "finalize")
	r.upgrade.FinalizeTNs = r.tl.Now()
	if err != nil {
		r.upgrade.FinalizeErr = oneLine(err)
		r.log.Warn("upgrade: finalize failed", "err", err)
		return
	}
	r.upgrade.Finalized, r.upgrade.Finalize = true, st
	r.log.Info("upgrade: finalized", "from", st.RaisedFrom, "to", st.ClusterVersion)
}

// writeUpgrade reads the final status and writes upgrade.json (upgrade
// mode only).
func (r *Run) writeUpgrade(ctx context.Context) error {
	if r.cfg.OldBinary == "" {
		return nil
	}
	st, err := r.ctlUpgrade(ctx, "status")
	if err != nil {
		r.upgrade.StatusErr = oneLine(err)
	}
	r.upgrade.Status = st
	return WriteJSONFile(filepath.Join(r.cfg.Out, UpgradeFile), &r.upgrade)
}

// buildVersion is a binary's --version line.
func buildVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "unknown: " + oneLine(err)
	}
	return strings.TrimSpace(string(out))
}

// Kinds of the upgrade check.
const (
	kindUpgradeIncomplete = "upgrade incomplete"
	kindUpgradeVersion    = "cluster version not every member's"
)

// checkUpgrade judges upgrade.json: every node replaced, the finalize
// done, and at the end every member supporting the version the cluster
// runs, which is above the older build's.
func checkUpgrade(h *history) *Check {
	c := newCheck("upgrade",
		"in upgrade mode, every node was replaced with this build (SIGTERM, then a start from its data dir), ctl upgrade finalize raised the cluster version, and at the end every member supports the version the cluster runs",
		kindUpgradeIncomplete, kindUpgradeVersion)
	u := h.in.Upgrade
	if !h.in.Run.Upgrade {
		c.Notes = append(c.Notes, "not an upgrade run; nothing checked")
		return c
	}
	if u == nil {
		c.flag(kindUpgradeIncomplete, "", 0, Example{Detail: "an upgrade run without " + UpgradeFile})
		return c
	}
	replaced := map[int]bool{}
	for _, nu := range u.Upgraded {
		if nu.Err != "" {
			c.flag(kindUpgradeIncomplete, "", nu.TNs, Example{Nodes: []int{nu.Node}, TNs: []int64{nu.TNs}, Detail: "node not replaced: " + nu.Err})
			continue
		}
		replaced[nu.Node] = true
	}
	for i := 1; i <= h.in.Run.Nodes; i++ {
		if !replaced[i] {
			c.flag(kindUpgradeIncomplete, "", 0, Example{Nodes: []int{i}, Detail: "node never ran this build"})
		}
	}
	if !u.Finalized {
		c.flag(kindUpgradeIncomplete, "", u.FinalizeTNs, Example{Detail: "not finalized: " + u.FinalizeErr})
	}
	st := u.Status
	if st == nil {
		c.flag(kindUpgradeVersion, "", 0, Example{Detail: "no final status: " + u.StatusErr})
		return c
	}
	if st.ClusterVersion <= 1 || st.ClusterVersion != st.Supported {
		c.flag(kindUpgradeVersion, "", 0, Example{Detail: fmt.Sprintf("the cluster runs version %d; its members support %d", st.ClusterVersion, st.Supported)})
	}
	if i := slices.IndexFunc(st.Members, func(m wire.MemberBuild) bool { return m.Err != "" || m.Supports != st.ClusterVersion }); i >= 0 {
		m := st.Members[i]
		c.flag(kindUpgradeVersion, "", 0, Example{Detail: fmt.Sprintf("member %s (%s) supports %d (%s)", fmt.Sprint(m.Node), m.Addr, m.Supports, m.Err)})
	}
	c.Notes = append(c.Notes, fmt.Sprintf("from %s: %d nodes replaced, cluster version %d", u.From, len(replaced), st.ClusterVersion))
	return c
}

// decommissionBound bounds a decommission nemesis's ctl decommission:
// every partition of the node copied and handed over under the workload.
const decommissionBound = 60 * time.Second

// applyDecommission retires node i as an operator does: `skuldd ctl
// decommission ID` through the other nodes moves its partitions to them,
// makes it leave (its process exits) and removes it. Its data dir is then
// deleted, and the heal starts it again empty, joining as a new member
// (the machine reused). Nothing is lost: unlike a wipe, every partition
// left the node before its disk did. In upgrade mode before the finalize
// the cluster refuses (its version does not have it yet): the refusal is
// recorded and the node is left alone.
func (r *Run) applyDecommission(ctx context.Context, a *active, i int) error {
	v, err := AnyView(ctx, r.api, r.cfg.Topology, r.serving())
	if err != nil {
		return err
	}
	var id uint64
	for nid, k := range v.Index {
		if k == i && memberAlive(v, nid) {
			id = nid
		}
	}
	if id == 0 {
		return fmt.Errorf("node %d is not an alive member", i)
	}
	p := r.nodes[i-1]
	done, err := p.ExpectExit()
	if err != nil {
		return err
	}
	var others []string
	for j := 1; j <= r.cfg.Topology.Nodes; j++ {
		if j != i {
			others = append(others, r.cfg.Topology.NodeAddr(j).String())
		}
	}
	cctx, cancel := context.WithTimeout(ctx, decommissionBound+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, r.cfg.Binary, "ctl", "--addr", strings.Join(others, ","),
		"--cluster-secret-file", r.secretPath, "decommission", "--wait", decommissionBound.String(), fmt.Sprint(id))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	a.detail["node_id"] = fmt.Sprintf("%016x", id)
	a.detail["decommission_ms"] = time.Since(start).Milliseconds()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if r.cfg.OldBinary != "" && !r.upgrade.Finalized && notYet(msg) {
			// The process was not asked to leave: its next exit is its
			// own again.
			p.mu.Lock()
			p.mu.causes &^= causeTerm
			p.mu.Unlock()
			a.detail["refused"] = msg
			a.heal = func(context.Context) error { return nil }
			return nil
		}
		return fmt.Errorf("ctl decommission %d (node %d): %w: %s", id, i, err, msg)
	}
	a.detail["removed"] = strings.TrimSpace(string(out))
	if err := p.WaitExit(done, r.cfg.StopGrace); err != nil {
		_ = p.Kill()
		a.detail["killed"] = "did not exit after leaving: killed -9"
	}
	a.targets = []int{i}
	dir := r.dataDir(i)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("node %d: delete %s: %w", i, dir, err)
	}
	var join []int
	for j := 1; j <= r.cfg.Topology.Nodes; j++ {
		if j != i {
			join = append(join, j)
		}
	}
	p.SetArgv(r.nodeArgv(i, join))
	a.heal = func(context.Context) error { return r.restart([]int{i}) }
	return nil
}

// memberAlive reports whether v's cluster view holds member id alive.
func memberAlive(v *View, id uint64) bool {
	for _, m := range v.Raw.Members {
		if m.ID == id {
			return m.State == "alive"
		}
	}
	return false
}

// notYet reports whether a ctl error says the cluster cannot do it yet:
// its version does not have it, or a node of an older build does not
// know the op.
func notYet(msg string) bool {
	return strings.Contains(msg, "cluster version") || strings.Contains(msg, "unknown op") || strings.Contains(msg, "does not serve it")
}
