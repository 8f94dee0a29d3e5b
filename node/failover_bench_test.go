package node_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/ring"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// BenchmarkFailover measures the time from a crash of a partition leader
// to the first claim its successor serves, with the production failure
// detection (gossip "lan" profile, 64 partitions) on three in-process
// nodes. Every ready task lives in a partition the victim leads, so the
// first successful claim is a successor's. Claims poll with a short
// timeout, so that one routed to the dead leader gives up soon: with 2 s,
// every figure came out a multiple of 2 s. The backlog is the number of
// tasks in the victim's partitions: a successor's sync compares hash
// trees, so the time should not grow with it.
//
//	go test -run '^$' -bench Failover -benchtime 3x ./node/
func BenchmarkFailover(b *testing.B) {
	for _, backlog := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) { benchFailover(b, backlog) })
	}
}

// failoverFillBatch is the enqueue batch that fills the backlog.
const failoverFillBatch = 1000

func benchFailover(b *testing.B, backlog int) {
	const failoverPoll = 250 * time.Millisecond
	var total time.Duration
	for range b.N {
		b.StopTimer()
		c := nodetest.NewCluster(b, 3, func(cfg *node.Config) {
			def := node.DefaultConfig()
			cfg.Partitions = def.Partitions
			cfg.GossipProfile = def.GossipProfile
			cfg.DeadVoterGrace = def.DeadVoterGrace
			cfg.Logger = slog.New(slog.DiscardHandler)
		})
		var all []uint64
		for i := range 3 {
			all = append(all, c.Node(i).ID())
		}
		c.Placed(b, 0, all, 3)
		v, err := c.View(0)
		if err != nil {
			b.Fatal(err)
		}
		const victim = 2
		vid := c.Node(victim).ID()
		var vparts []uint16
		for _, p := range v.Partitions {
			if p.Leader == vid {
				vparts = append(vparts, uint16(p.Partition))
			}
		}
		if len(vparts) == 0 {
			b.Fatal("the victim leads no partition")
		}
		// Tasks with ids chosen to land in the victim's partitions.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		for left := backlog; left > 0; {
			var batch []wire.EnqueueTask
			for len(batch) < min(left, failoverFillBatch) {
				var id task.ID
				_, _ = rand.Read(id[:])
				if slices.Contains(vparts, ring.PartitionOf(id[:], len(v.Partitions))) {
					batch = append(batch, wire.EnqueueTask{ID: &id, Queue: "fo"})
				}
			}
			if _, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: batch}); err != nil {
				b.Fatal(err)
			}
			left -= len(batch)
		}
		b.StartTimer()
		began := time.Now()
		c.Kill(victim)
		for {
			cctx, ccancel := context.WithTimeout(ctx, failoverPoll)
			r, err := c.Client(0).Claim(cctx, &wire.ClaimRequest{Queue: "fo"})
			ccancel()
			if err == nil && len(r.Tasks) > 0 {
				break
			}
			if time.Since(began) > time.Minute {
				b.Fatal("no claim within a minute of the crash")
			}
			time.Sleep(10 * time.Millisecond)
		}
		total += time.Since(began)
		b.StopTimer()
		cancel()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-first-claim")
}

// BenchmarkHandOffPause measures what a planned handoff costs the writes
// of the partitions it moves: 16 clients enqueue one task at a time into
// the partitions node 2 leads while node 2 leaves (ctl leave: it hands
// each partition it leads to another member, one handoff each). During
// a handoff the old leader has promised the new epoch and refuses its
// own old one, so writes wait (node's waitLead, then the coordinator's
// retry) until the new leader serves. It reports the worst and the 99th
// percentile enqueue latency of the enqueues begun while the leave ran,
// the same of a baseline second before it, and how long the leave took.
// An enqueue counts for the leave when it overlapped it.
//
//	go test -run '^$' -bench HandOffPause -benchtime 3x ./node/
func BenchmarkHandOffPause(b *testing.B) {
	const (
		writers  = 16
		baseline = time.Second
		// settleAfterLeave lets the enqueues in flight at the leave's
		// end finish before the writers stop.
		settleAfterLeave = 3 * time.Second
	)
	var leaveMax, leaveP99, baseP99, leaveDur time.Duration
	for range b.N {
		b.StopTimer()
		c := nodetest.NewCluster(b, 3, func(cfg *node.Config) {
			cfg.Partitions = 16
			cfg.Logger = slog.New(slog.DiscardHandler)
		})
		all := c.IDs(0, 1, 2)
		c.Placed(b, 0, all, 3)
		const victim = 2
		vid := all[victim]
		v, err := c.View(0)
		if err != nil {
			b.Fatal(err)
		}
		var vparts []uint16
		for _, p := range v.Partitions {
			if p.Leader == vid {
				vparts = append(vparts, uint16(p.Partition))
			}
		}
		if len(vparts) == 0 {
			b.Fatal("node 2 leads no partition")
		}
		type sample struct {
			began time.Time
			took  time.Duration
		}
		ctx, cancel := context.WithCancel(context.Background())
		samples := make([][]sample, writers)
		errs := make(chan error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for ctx.Err() == nil {
					var id task.ID
					for {
						_, _ = rand.Read(id[:])
						if slices.Contains(vparts, ring.PartitionOf(id[:], len(v.Partitions))) {
							break
						}
					}
					began := time.Now()
					_, err := c.Client(0).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &id, Queue: "pause"}}})
					if err != nil {
						if ctx.Err() == nil {
							errs <- fmt.Errorf("enqueue: %w", err)
						}
						return
					}
					samples[w] = append(samples[w], sample{began, time.Since(began)})
				}
			})
		}
		time.Sleep(baseline)
		b.StartTimer()
		leaveFrom := time.Now()
		resp, err := c.Node(victim).Leave(ctx)
		leaveTo := time.Now()
		b.StopTimer()
		time.Sleep(settleAfterLeave) // the enqueues the leave held finish
		cancel()
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		if err != nil || resp.Failed > 0 || resp.HandedOff != len(vparts) {
			b.Fatalf("leave: %+v, %v; want %d partitions handed off", resp, err, len(vparts))
		}
		var during, before []time.Duration
		for _, ss := range samples {
			for _, s := range ss {
				ended := s.began.Add(s.took)
				switch {
				case s.began.Before(leaveTo) && ended.After(leaveFrom): // overlapped the leave
					during = append(during, s.took)
				case ended.Before(leaveFrom) && s.began.After(leaveFrom.Add(-baseline/2)):
					before = append(before, s.took)
				}
			}
		}
		if len(during) == 0 || len(before) == 0 {
			b.Fatalf("%d enqueues overlapped the leave, %d before it; want some of each", len(during), len(before))
		}
		slices.Sort(during)
		slices.Sort(before)
		leaveMax += during[len(during)-1]
		leaveP99 += during[len(during)*99/100]
		baseP99 += before[len(before)*99/100]
		leaveDur += leaveTo.Sub(leaveFrom)
		c.Stop(victim)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(leaveMax), "leave-max-ms")
	b.ReportMetric(ms(leaveP99), "leave-p99-ms")
	b.ReportMetric(ms(baseP99), "base-p99-ms")
	b.ReportMetric(ms(leaveDur), "leave-ms")
}
