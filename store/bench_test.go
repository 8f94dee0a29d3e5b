package store_test

import (
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/skuldd/skuldd/store"
	"github.com/skuldd/skuldd/task"
)

// BenchmarkSyncedCommitParallel measures durable (synced) task writes from
// many goroutines on the real disk: the ceiling group commit gives every
// acknowledged write. Run with -cpu and -benchtime; it reports commits/s.
//
//	go test -run xxx -bench SyncedCommit -benchtime 3s ./store/
func BenchmarkSyncedCommitParallel(b *testing.B) {
	s, err := store.Open(store.DefaultConfig(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var ctr atomic.Uint64
	data := make([]byte, 100)
	b.SetParallelism(32) // 64 writers on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var id task.ID
			binary.BigEndian.PutUint64(id[:8], ctr.Add(1))
			bt := s.NewBatch()
			if err := bt.PutSpec(0, &task.Spec{ID: id, Queue: "q", Data: data}); err != nil {
				b.Error(err)
				return
			}
			if err := bt.Commit(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkSyncedCommitSerial measures one writer's durable commits: the
// latency of one WAL sync on this disk.
func BenchmarkSyncedCommitSerial(b *testing.B) {
	s, err := store.Open(store.DefaultConfig(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 100)
	b.ResetTimer()
	for i := range b.N {
		var id task.ID
		binary.BigEndian.PutUint64(id[:8], uint64(i+1))
		bt := s.NewBatch()
		if err := bt.PutSpec(0, &task.Spec{ID: id, Queue: "q", Data: data}); err != nil {
			b.Fatal(err)
		}
		if err := bt.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}
