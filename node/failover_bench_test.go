package node_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"slices"
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
