package partition

import (
	"math/rand/v2"
	"testing"

	"github.com/skuldd/skuldd/task"
)

// TestQueueIndexHead checks queueIndex's invariant (head is the ready
// tree's minimum, and absent when the tree is empty) through random pushes
// and pops: of new, repeated and absent items, at mixed priorities.
func TestQueueIndexHead(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := newQueueIndex("q")
	var held []Head
	for i := range 20000 {
		h := Head{Priority: int32(rng.IntN(4)), ID: task.MakeID(int64(rng.IntN(500)), 1, uint32(rng.IntN(4)))}
		switch {
		case rng.IntN(3) > 0 || len(held) == 0:
			q.push(h)
			held = append(held, h)
		case rng.IntN(2) == 0:
			k := rng.IntN(len(held))
			h = held[k]
			q.pop(h)
			held = append(held[:k], held[k+1:]...)
		default:
			was := q.ready.Has(h)
			if got := q.pop(h); got != was {
				t.Fatalf("step %d: pop(%v) = %v; the tree held it: %v", i, h, got, was)
			}
		}
		want, wok := q.ready.Min()
		got, ok := q.head()
		if ok != wok || got != want {
			t.Fatalf("step %d: head = %v, %v; the tree's minimum is %v, %v", i, got, ok, want, wok)
		}
	}
}

// BenchmarkQueueIndexClaim measures a claim's index work on a queue of
// 1e5 ready tasks: pop the head, and an enqueue's push at the tail.
func BenchmarkQueueIndexClaim(b *testing.B) {
	q := newQueueIndex("q")
	const depth = 100_000
	next := uint32(0)
	for ; next < depth; next++ {
		q.push(Head{ID: task.MakeID(1, 1, next)})
	}
	b.ResetTimer()
	for range b.N {
		h, _ := q.head()
		q.pop(h)
		q.push(Head{ID: task.MakeID(1, 1, next)})
		next++
	}
}
