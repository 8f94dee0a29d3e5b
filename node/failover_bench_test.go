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

// BenchmarkHandOffPause measures what a planned handoff costs the
// enqueues of the partitions it moves: 16 clients enqueue one task at a
// time into the partitions node 2 leads while node 2 leaves (ctl leave:
// it hands each partition it leads to another member, one handoff each).
// Enqueues need no leader (the coordinator writes the cohort directly),
// so a handoff should not show in their latency. It reports the worst and
// the 99th percentile enqueue latency of the enqueues that overlapped the
// leave, the 99th percentile of a baseline second before it, and how long
// the leave took.
//
//	go test -run '^$' -bench HandOffPause -benchtime 3x ./node/
func BenchmarkHandOffPause(b *testing.B) {
	enqueuePause(b, "leave", func(c *nodetest.Cluster, victim int) error {
		resp, err := c.Node(victim).Leave(context.Background())
		if err == nil && resp.Failed > 0 {
			err = fmt.Errorf("leave: %+v", resp)
		}
		return err
	})
}

// BenchmarkKillPause is BenchmarkHandOffPause with node 2 killed instead
// (kill -9: no handoff; the others find it dead and fail its partitions
// over), the enqueues measured over the failover window that follows.
//
//	go test -run '^$' -bench KillPause -benchtime 3x ./node/
func BenchmarkKillPause(b *testing.B) {
	const failoverWindow = 5 * time.Second
	enqueuePause(b, "kill", func(c *nodetest.Cluster, victim int) error {
		c.Kill(victim)
		time.Sleep(failoverWindow)
		return nil
	})
}

// enqueuePause runs 16 writers enqueueing into the partitions node 2
// leads, applies disrupt to node 2, and reports the enqueue latencies
// that overlapped it against a baseline before it (see
// BenchmarkHandOffPause).
func enqueuePause(b *testing.B, what string, disrupt func(c *nodetest.Cluster, victim int) error) {
	const (
		writers  = 16
		baseline = time.Second
		// settleAfter lets the enqueues in flight at the disruption's
		// end finish before the writers stop.
		settleAfter = 3 * time.Second
	)
	var worst, p99, baseP99, took time.Duration
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
		from := time.Now()
		derr := disrupt(c, victim)
		to := time.Now()
		b.StopTimer()
		time.Sleep(settleAfter) // the enqueues the disruption held finish
		cancel()
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		if derr != nil {
			b.Fatalf("%s: %v", what, derr)
		}
		var during, before []time.Duration
		for _, ss := range samples {
			for _, s := range ss {
				ended := s.began.Add(s.took)
				switch {
				case s.began.Before(to) && ended.After(from): // overlapped the disruption
					during = append(during, s.took)
				case ended.Before(from) && s.began.After(from.Add(-baseline/2)):
					before = append(before, s.took)
				}
			}
		}
		if len(during) == 0 || len(before) == 0 {
			b.Fatalf("%d enqueues overlapped the %s, %d before it; want some of each", len(during), what, len(before))
		}
		slices.Sort(during)
		slices.Sort(before)
		worst += during[len(during)-1]
		p99 += during[len(during)*99/100]
		baseP99 += before[len(before)*99/100]
		took += to.Sub(from)
		c.Stop(victim)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(worst), what+"-max-ms")
	b.ReportMetric(ms(p99), what+"-p99-ms")
	b.ReportMetric(ms(baseP99), "base-p99-ms")
	b.ReportMetric(ms(took), what+"-ms")
}
