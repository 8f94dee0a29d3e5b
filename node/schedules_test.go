package node_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// scheduleTasks lists the tasks of queue by the occurrence their key
// names, for schedule name at version.
func scheduleTasks(t *testing.T, ctx context.Context, cl *wire.Client, queue, name string, version uint64) map[int64]int {
	t.Helper()
	got := map[int64]int{}
	err := cl.List(ctx, &wire.ListRequest{Queue: queue}, func(p *wire.ListPage) error {
		for _, v := range p.Tasks {
			n, ver, at, ok := wire.ParseOccurrenceKey(v.Key)
			if !ok || n != name || ver != version {
				return fmt.Errorf("task %s in %s has key %q: not an occurrence of %s version %d", v.ID, queue, v.Key, name, version)
			}
			got[at]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkOccurrences: every occurrence of s up to its progress has one
// task, none after it more than one, and the counts agree.
func checkOccurrences(t *testing.T, s wire.ScheduleView, tasks map[int64]int) {
	t.Helper()
	var onTime int
	for at := s.Start + s.EveryMs; at <= s.Done; at += s.EveryMs {
		if tasks[at] != 1 {
			t.Errorf("occurrence %d (%d s after the start): %d tasks; want 1", at, (at-s.Start)/1000, tasks[at])
		}
		onTime++
	}
	for at, n := range tasks {
		if (at-s.Start)%s.EveryMs != 0 || at <= s.Start {
			t.Errorf("a task for %d, which is not an occurrence", at)
		}
		if at > s.Done && n > 1 {
			t.Errorf("occurrence %d, in flight: %d tasks", at, n)
		}
	}
	if s.Skipped != 0 || s.Enqueued != uint64(onTime) {
		t.Errorf("schedule counts enqueued %d, skipped %d; want %d, 0", s.Enqueued, s.Skipped, onTime)
	}
}

// TestScheduleAcrossRaftLeaderKill: an every-1s schedule keeps producing
// each occurrence once while the metadata group's leader, which enqueues
// them, is killed and another takes over: the occurrences of the
// failover are enqueued late, none twice, none skipped.
func TestScheduleAcrossRaftLeaderKill(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	all := c.IDs(0, 1, 2)
	c.Placed(t, 0, all, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*clusterWait)
	defer cancel()
	s, err := c.Client(0).ScheduleSet(ctx, &wire.ScheduleSetRequest{Name: "tick", Queue: "ticks", EveryMs: 1000, Data: []byte("t")})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.Client(1).ScheduleSet(ctx, &wire.ScheduleSetRequest{Name: "tick", Queue: "ticks", EveryMs: 1000, Data: []byte("t")}); err != nil ||
		again.Version != s.Version || again.Start != s.Start {
		t.Fatalf("the same spec set again: %+v, %v; want version %d unchanged", again, err, s.Version)
	}
	progress := func(i int, atLeast uint64) wire.ScheduleView {
		var v wire.ScheduleView
		nodetest.WaitFor(t, clusterWait, func() error {
			l, err := c.Client(i).ScheduleList(ctx, &wire.ScheduleListRequest{Name: "tick"})
			if err != nil {
				return err
			}
			if v = l.Schedules[0]; v.Enqueued < atLeast {
				return fmt.Errorf("enqueued %d of %d", v.Enqueued, atLeast)
			}
			return nil
		})
		return v
	}
	before := progress(0, 3)
	v, err := c.View(0)
	if err != nil {
		t.Fatal(err)
	}
	lead := slices.Index(all, v.Raft.Leader)
	if lead < 0 {
		t.Fatalf("raft leader %d is not a node of the cluster %v", v.Raft.Leader, all)
	}
	c.Kill(lead)
	other := (lead + 1) % 3
	after := progress(other, before.Enqueued+5)
	c.Restart(lead)
	final := progress(other, after.Enqueued+2)
	if final.Version != s.Version {
		t.Fatalf("version %d, set as %d", final.Version, s.Version)
	}
	checkOccurrences(t, final, scheduleTasks(t, ctx, c.Client(other), "ticks", "tick", s.Version))
	if d, err := c.Client(lead).ScheduleDelete(ctx, &wire.ScheduleDeleteRequest{Name: "tick"}); err != nil || !d.Deleted {
		t.Fatalf("delete: %+v, %v", d, err)
	}
}
