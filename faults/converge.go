package faults

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Convergence (TESTING.md section 6.5): from the heal, with writes
// stopped, every node's replicas are polled every convergePoll; the
// cluster has converged once, for every partition, every cohort member
// holds it with the same anti-entropy root for convergeStreak polls in a
// row.
const (
	convergePoll   = 100 * time.Millisecond
	convergeStreak = 3
	// drainWait is a drain claim's long-poll: an empty answer then
	// means nothing turned ready for that long.
	drainWait = 300 * time.Millisecond
	// drainEmpties: each node must answer empty this many times in a
	// row.
	drainEmpties = 3
)

// ConvergeReport is the convergence phase's outcome.
type ConvergeReport struct {
	Converged bool `json:"converged"`
	// AfterHealMs is the time from the heal to the first of the
	// convergeStreak polls that agreed.
	AfterHealMs int64 `json:"after_heal_ms"`
	Polls       int   `json:"polls"`
	// Partitions lists those that had not converged at the last poll,
	// with the reason.
	Partitions map[int]string `json:"partitions,omitempty"`
	// Roots are the partitions' anti-entropy roots once converged.
	Roots   map[int]string `json:"roots,omitempty"`
	Skipped string         `json:"skipped,omitempty"`
}

// convergence polls until the replicas agree or ConvergeTimeout passes,
// and records the converged or not-converged phase.
func (r *Run) convergence(ctx context.Context, heal int64) {
	rep := r.pollConvergence(ctx, heal)
	r.sum.Converge = rep
	detail := map[string]any{"after_heal_ms": rep.AfterHealMs, "polls": rep.Polls}
	name := PhaseConverged
	if !rep.Converged {
		name = PhaseNotConverged
		detail["partitions"] = rep.Partitions
		if rep.Skipped != "" {
			detail["reason"] = rep.Skipped
		}
	}
	r.phase(name, detail)
}

func (r *Run) pollConvergence(ctx context.Context, heal int64) ConvergeReport {
	var rep ConvergeReport
	if !r.hooks {
		rep.Skipped = "no /debug/replicas: " + r.hooksWhy
		return rep
	}
	deadline := time.Now().Add(r.cfg.ConvergeTimeout)
	// A poll in flight at the deadline ends with it.
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	streak := 0
	var first int64
	for ctx.Err() == nil && time.Now().Before(deadline) {
		at := r.tl.Now()
		rep.Polls++
		diff, roots := r.pollOnce(ctx)
		if len(diff) == 0 {
			if streak == 0 {
				first = at
			}
			streak++
			if streak >= convergeStreak {
				rep.Converged, rep.AfterHealMs, rep.Partitions, rep.Roots = true, (first-heal)/1e6, nil, roots
				return rep
			}
		} else {
			streak, rep.Partitions = 0, diff
		}
		_ = sleepCtx(ctx, convergePoll-time.Duration(r.tl.Now()-at))
	}
	rep.AfterHealMs = (r.tl.Now() - heal) / 1e6
	return rep
}

// pollOnce reads every node's replicas and returns the partitions whose
// cohort members disagree (or cannot be read), with why, and the roots of
// those whose members agree.
func (r *Run) pollOnce(ctx context.Context) (map[int]string, map[int]string) {
	n := r.cfg.Topology.Nodes
	reps := make([]*Replicas, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() { reps[i], errs[i] = FetchReplicas(ctx, r.api, i) })
	}
	view, verr := AnyView(ctx, r.api, r.cfg.Topology, allNodes(n))
	wg.Wait()
	diff, roots := map[int]string{}, map[int]string{}
	if verr != nil {
		for p := range r.cfg.Partitions {
			diff[p] = "no cluster view"
		}
		return diff, roots
	}
	for p := range r.cfg.Partitions {
		cohort := view.CohortOf(p)
		if len(cohort) == 0 {
			diff[p] = "no cohort"
			continue
		}
		// A replica wiped for good and not yet replaced holds nothing:
		// the partition has fewer copies than its cohort says.
		if gone := view.GoneOf(p); len(gone) > 0 {
			diff[p] = fmt.Sprintf("cohort still names the old id of wiped node(s) %v", gone)
			continue
		}
		var root string
		for _, i := range cohort {
			if errs[i] != nil {
				diff[p] = errs[i].Error()
				break
			}
			st, ok := replicaOf(reps[i], p)
			if !ok || !st.Held {
				diff[p] = fmt.Sprintf("node %d does not hold it", i)
				break
			}
			if root == "" {
				root = st.Root
			} else if st.Root != root {
				diff[p] = fmt.Sprintf("roots differ across cohort %v", cohort)
				break
			}
		}
		if _, bad := diff[p]; !bad {
			roots[p] = root
		}
	}
	return diff, roots
}

func replicaOf(rs *Replicas, p int) (ReplicaState, bool) {
	if rs == nil {
		return ReplicaState{}, false
	}
	for _, st := range rs.Partitions {
		if st.Partition == p {
			return st, true
		}
	}
	return ReplicaState{}, false
}

// drain claims and completes what is left, through every node, as one
// more client loop inside the harness.
func (r *Run) drain(ctx context.Context) {
	r.phase(PhaseDrain, nil)
	l := NewLoop(r.loopConfig(r.cfg.Workers), &RecEmitter{Rec: r.rec, Sink: r.sink, TL: r.tl})
	defer l.Close()
	// The request in flight at the bound ends with it.
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DrainTimeout)
	defer cancel()
	rep := l.Drain(dctx, r.cfg.DrainTimeout, drainWait, drainEmpties)
	r.sum.Drain = rep
	r.log.Info("drain", "claimed", rep.Claimed, "completed", rep.Completed, "done", rep.Done, "seconds", rep.Seconds)
	if !rep.Done {
		r.sum.Notes = append(r.sum.Notes, fmt.Sprintf("drain did not finish within %v", r.cfg.DrainTimeout))
	}
}

// FinalReport counts the final reads.
type FinalReport struct {
	Tasks    int `json:"tasks"`
	Reads    int `json:"reads"`
	Found    int `json:"found"`
	NotFound int `json:"not_found"`
	Errors   int `json:"errors"`
	// Skipped counts reads not sent: their node had stopped answering
	// (for every task, or for the task's partition), or the phase's bound
	// had passed (each is in final.jsonl with Err).
	Skipped int     `json:"skipped"`
	Seconds float64 `json:"seconds"`
}

// deadNodeFailures: after this many transport failures in a row, a node
// is taken for down and the rest of its reads are recorded unread, so a
// node that hangs costs seconds, not a timeout per task.
const deadNodeFailures = 20

// deadPartitionFailures: after this many failed reads in a row of one
// partition's tasks through one node, the rest of that partition's reads
// through it are recorded unread. A partition that lost a majority of its
// replicas for good (a wipe, beyond the bounds) never has a leader again,
// and a node outside its cohort then holds each read for the whole request
// timeout: without this, its tasks alone would keep the final reads going
// for their whole bound while every other read succeeds, resetting the
// node's count.
const deadPartitionFailures = 10

// finalReads reads every task ever attempted through every node, its own
// replica (r=1), into final.jsonl: one line per task and node, within
// FinalTimeout.
func (r *Run) finalReads(ctx context.Context) error {
	r.phase(PhaseFinal, nil)
	start := time.Now()
	r.mu.Lock()
	tasks := slices.Clone(r.mu.tasks)
	r.mu.Unlock()
	w, err := CreateJSONL(filepath.Join(r.cfg.Out, FinalFile))
	if err != nil {
		return err
	}
	type job struct {
		task string
		node int
		part int // -1 if the id does not parse
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.FinalTimeout)
	defer cancel()
	jobs := make(chan job)
	var mu sync.Mutex
	rep := FinalReport{Tasks: len(tasks)}
	failures := make([]int, r.cfg.Topology.Nodes+1)
	type nodePart struct{ node, part int }
	partFailures := map[nodePart]int{}
	var wg sync.WaitGroup
	for range r.cfg.FinalReaders {
		wg.Go(func() {
			for j := range jobs {
				np := nodePart{j.node, j.part}
				mu.Lock()
				dead := failures[j.node] >= deadNodeFailures
				deadPart := j.part >= 0 && partFailures[np] >= deadPartitionFailures
				mu.Unlock()
				var fr FinalRead
				switch {
				case dead:
					fr = FinalRead{Task: j.task, Node: j.node, TNs: r.tl.Now(), Err: "not read: the node stopped answering"}
				case deadPart:
					fr = FinalRead{Task: j.task, Node: j.node, TNs: r.tl.Now(),
						Err: fmt.Sprintf("not read: the node stopped answering for partition %d", j.part)}
				case rctx.Err() != nil:
					fr = FinalRead{Task: j.task, Node: j.node, TNs: r.tl.Now(), Err: "not read: the final reads' bound passed"}
				default:
					fr = r.readFinal(rctx, j.task, j.node)
				}
				w.Write(&fr)
				mu.Lock()
				rep.Reads++
				switch {
				case dead || deadPart || strings.HasPrefix(fr.Err, "not read"):
					rep.Skipped++
				case fr.Err != "":
					rep.Errors++
					failures[j.node]++
					partFailures[np]++
				case fr.Found:
					rep.Found++
					failures[j.node], partFailures[np] = 0, 0
				default:
					rep.NotFound++
					failures[j.node], partFailures[np] = 0, 0
				}
				mu.Unlock()
			}
		})
	}
	for _, t := range tasks {
		part := partitionOfTask(t, r.cfg.Partitions)
		for i := 1; i <= r.cfg.Topology.Nodes; i++ {
			jobs <- job{t, i, part}
		}
	}
	close(jobs)
	wg.Wait()
	rep.Seconds = time.Since(start).Seconds()
	r.sum.Final = rep
	r.log.Info("final reads", "tasks", rep.Tasks, "reads", rep.Reads, "found", rep.Found, "not_found", rep.NotFound, "errors", rep.Errors, "skipped", rep.Skipped, "seconds", rep.Seconds)
	if err := w.Close(); err != nil {
		return err
	}
	return ctx.Err()
}

// readFinal reads task through node's own replica.
func (r *Run) readFinal(ctx context.Context, task string, node int) FinalRead {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ReqTimeout)
	defer cancel()
	res := r.api.Do(ctx, node, http.MethodGet, "/v1/tasks/"+task+"?r=1", nil, nil)
	fr := FinalRead{Task: task, Node: node, TNs: r.tl.Now()}
	switch {
	case res.Type == OK:
		fr.Found, fr.View = true, append([]byte(nil), bytesTrimNL(res.Body)...)
	case res.Code == "not_found":
	default:
		fr.Err = fmt.Sprintf("%s %s", res.Code, res.Err)
	}
	return fr
}

func bytesTrimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
