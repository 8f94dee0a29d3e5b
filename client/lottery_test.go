package client

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// TestLotteryProportions: with every queue full, draws follow the weights
// 100/40/5 and the lightest queue is never starved.
func TestLotteryProportions(t *testing.T) {
	qs := []Queue{{Name: "high", Weight: 100}, {Name: "default", Weight: 40}, {Name: "low", Weight: 5}}
	l := newLottery(qs, seeded(1))
	all := func(int) bool { return true }
	const draws = 145_000
	var got [3]int
	for range draws {
		i, poll, ok := l.draw(all)
		if !ok || poll {
			t.Fatalf("draw = %d, poll %v, ok %v; want a queue without a long-poll", i, poll, ok)
		}
		l.found(i, false)
		got[i]++
	}
	for i, q := range qs {
		want := float64(draws) * float64(q.Weight) / 145
		if math.Abs(float64(got[i])-want) > 0.05*want {
			t.Errorf("queue %s: %d draws of %d; want %.0f within 5%%", q.Name, got[i], draws, want)
		}
	}
}

// TestLotteryDropsEmptyQueues: a queue found empty is not drawn again
// until every queue was; then the pool resets and the draw long-polls.
// Queues without room are never drawn.
func TestLotteryDropsEmptyQueues(t *testing.T) {
	qs := []Queue{{Name: "a", Weight: 100}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}}
	l := newLottery(qs, seeded(2))
	all := func(int) bool { return true }
	l.found(0, true)
	for range 1000 {
		if i, poll, _ := l.draw(all); i == 0 || poll {
			t.Fatalf("drew queue %d (poll %v) after queue 0 was found empty", i, poll)
		}
	}
	l.found(1, true)
	for range 100 {
		if i, poll, _ := l.draw(all); i != 2 || poll {
			t.Fatalf("drew queue %d (poll %v); want c, the only one not found empty", i, poll)
		}
	}
	l.found(2, true)
	if _, poll, ok := l.draw(all); !ok || !poll {
		t.Fatalf("every queue empty: poll %v, ok %v; want a long-poll", poll, ok)
	}
	// The pool was reset: all are drawn again, without a long-poll.
	seen := map[int]bool{}
	for range 10_000 {
		i, poll, _ := l.draw(all)
		if poll {
			t.Fatal("long-poll after the reset")
		}
		seen[i] = true
	}
	if len(seen) != 3 {
		t.Fatalf("after the reset drew %v; want every queue", seen)
	}
	onlyB := func(i int) bool { return i == 1 }
	for range 100 {
		if i, _, ok := l.draw(onlyB); !ok || i != 1 {
			t.Fatalf("drew %d; only b has room", i)
		}
	}
	if _, _, ok := l.draw(func(int) bool { return false }); ok {
		t.Fatal("drew a queue though none has room")
	}
}

// TestBackoffGrowsWithJitter: the delay doubles per attempt up to Max,
// each within the jitter of its nominal value, and the jitter spreads
// delays of the same attempt.
func TestBackoffGrowsWithJitter(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.25}
	for n := uint32(1); n <= 8; n++ {
		nominal := min(b.Base<<(n-1), b.Max)
		lo, hi := time.Duration(float64(nominal)*0.75), time.Duration(float64(nominal)*1.25)
		distinct := map[time.Duration]bool{}
		for range 200 {
			d := b.Delay(n)
			if d < lo || d > hi {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", n, d, lo, hi)
			}
			distinct[d] = true
		}
		if len(distinct) < 50 {
			t.Errorf("attempt %d: %d distinct delays of 200; want jitter", n, len(distinct))
		}
	}
	if d := (Backoff{Base: time.Second, Max: time.Minute}).Delay(3); d != 4*time.Second {
		t.Errorf("no jitter: Delay(3) = %v; want 4s", d)
	}
}
