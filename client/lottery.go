package client

import "math/rand/v2"

// lottery picks the queue a Worker claims from next: Kale's
// ReducedLottery. Each queue holds Weight tickets; a draw picks a ticket
// at random among the queues not found empty since the last reset, so a
// heavier queue is picked more often and a light one still gets its
// share. A queue a claim found empty leaves the pool; once every queue
// left, the pool is reset and the draw says so (poll): only then does
// the claim long-poll, so a worker never waits on one empty queue while
// another has work.
type lottery struct {
	weights []int
	empty   []bool
	rng     *rand.Rand
}

func newLottery(queues []Queue, rng *rand.Rand) *lottery {
	l := &lottery{weights: make([]int, len(queues)), empty: make([]bool, len(queues)), rng: rng}
	for i, q := range queues {
		l.weights[i] = q.Weight
	}
	return l
}

// draw picks a queue among those with room (room(i)). poll is true when
// every queue with room had been found empty: the pool was reset, and
// the claim should long-poll. ok is false when no queue has room.
func (l *lottery) draw(room func(int) bool) (i int, poll, ok bool) {
	if i, ok := l.pick(room); ok {
		return i, false, true
	}
	// Every queue with room was found empty: reset them.
	any := false
	for j := range l.empty {
		if room(j) {
			l.empty[j], any = false, true
		}
	}
	if !any {
		return 0, false, false
	}
	i, _ = l.pick(room)
	return i, true, true
}

// pick draws a ticket among the queues with room not found empty.
func (l *lottery) pick(room func(int) bool) (int, bool) {
	total := 0
	for j, w := range l.weights {
		if room(j) && !l.empty[j] {
			total += w
		}
	}
	if total == 0 {
		return 0, false
	}
	t := l.rng.IntN(total)
	for j, w := range l.weights {
		if room(j) && !l.empty[j] {
			if t < w {
				return j, true
			}
			t -= w
		}
	}
	panic("lottery: ticket beyond the total") // unreachable: t < total
}

// found records what a claim from queue i found.
func (l *lottery) found(i int, empty bool) { l.empty[i] = empty }
