package store

import (
	"encoding/binary"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBlockCacheHoldsBlocks guards the cache sizing: Pebble charges its
// memtables to the block cache, and a cache no larger than the memtables
// holds no blocks at all, so every read goes to the file. Reads of flushed
// data repeated must hit the cache.
func TestBlockCacheHoldsBlocks(t *testing.T) {
	s, err := Open(Config{Dir: "db", FS: vfs.NewMem(), CacheBytes: 1 << 20, MemTableBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Enough writes for the memtables to grow to full size and flush.
	const n = 40000
	val := make([]byte, 200)
	key := func(i int) []byte { return binary.BigEndian.AppendUint32([]byte{0x7f}, uint32(i)) }
	for i := 0; i < n; i += 1000 {
		b := s.db.NewBatch()
		for j := i; j < i+1000; j++ {
			if err := b.Set(key(j), val, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < 100; i++ {
			v, closer, err := s.db.Get(key(i))
			if err != nil {
				t.Fatalf("get %d: %v", i, err)
			}
			if len(v) != len(val) {
				t.Fatalf("get %d: %d bytes", i, len(v))
			}
			_ = closer.Close()
		}
	}
	m := s.db.Metrics()
	if m.BlockCache.Hits == 0 || m.BlockCache.Size == 0 {
		t.Fatalf("block cache holds nothing: hits %d misses %d size %d", m.BlockCache.Hits, m.BlockCache.Misses, m.BlockCache.Size)
	}
}
