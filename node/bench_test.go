package node_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/node/nodetest"
	"github.com/skuldd/skuldd/wire"
)

// benchClients is the concurrency of the in-process benchmarks: the
// issue's figures are at 64 clients.
const benchClients = 64

// benchCluster starts one node with the production timers (64 partitions,
// 10 s skew bound) and dials conns connections to it.
func benchCluster(b *testing.B, conns int) []*wire.Client {
	c := nodetest.NewCluster(b, 1, func(cfg *node.Config) {
		def := node.DefaultConfig()
		cfg.Partitions = def.Partitions
		cfg.SkewBound = def.SkewBound
		cfg.TickInterval = def.TickInterval
		cfg.Logger = slog.New(slog.DiscardHandler)
	})
	var cls []*wire.Client
	for range conns {
		conn, err := wire.Dial(context.Background(), c.Addr(0), wire.ClientConfig{})
		if err != nil {
			b.Fatal(err)
		}
		cl := wire.NewClient(conn)
		b.Cleanup(func() { cl.Close() })
		cls = append(cls, cl)
	}
	return cls
}

// runClients runs op b.N times spread over benchClients goroutines and
// reports ops/s.
func runClients(b *testing.B, cls []*wire.Client, op func(cl *wire.Client) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range benchClients {
		wg.Go(func() {
			cl := cls[w%len(cls)]
			for next.Add(1) <= int64(b.N) {
				if err := op(cl); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkEnqueue measures durable single-task enqueues from 64 clients
// over QUIC, server and clients in one process:
//
//	go test -run xxx -bench 'Enqueue|ClaimComplete' -benchtime 50000x ./node/
func BenchmarkEnqueue(b *testing.B) {
	cls := benchCluster(b, 4)
	data := make([]byte, 100)
	runClients(b, cls, func(cl *wire.Client) error {
		_, err := cl.Enqueue(context.Background(), &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{Queue: "q", Data: data}}})
		return err
	})
}

// BenchmarkClaimComplete measures claim+complete pairs from 64 clients on a
// queue filled beforehand with b.N tasks.
func BenchmarkClaimComplete(b *testing.B) {
	cls := benchCluster(b, 4)
	data := make([]byte, 100)
	batch := make([]wire.EnqueueTask, 1000)
	for i := range batch {
		batch[i] = wire.EnqueueTask{Queue: "q", Data: data}
	}
	for left := b.N; left > 0; left -= len(batch) {
		if _, err := cls[0].Enqueue(context.Background(), &wire.EnqueueRequest{Tasks: batch[:min(left, len(batch))]}); err != nil {
			b.Fatal(err)
		}
	}
	runClients(b, cls, func(cl *wire.Client) error {
		r, err := cl.Claim(context.Background(), &wire.ClaimRequest{Queue: "q"})
		if err != nil || len(r.Tasks) == 0 {
			return err
		}
		_, err = cl.Complete(context.Background(), &wire.CompleteRequest{ID: r.Tasks[0].ID, Claim: *r.Tasks[0].Claim})
		return err
	})
}
