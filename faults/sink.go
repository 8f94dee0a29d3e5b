package faults

import "sync"

// Sink is the harness's fenced sink: the stand-in for the side effect a
// worker performs before it completes a task (TESTING.md section 6.4). It
// accepts an effect of a task unless it already took one of the same task
// under a higher claim id, which is what a downstream system fenced by
// skuldd's claim ids would do. Safe for concurrent use.
type Sink struct {
	mu struct {
		sync.Mutex
		// high is the highest claim id accepted per task.
		high map[string]uint32
	}
}

// NewSink returns an empty sink.
func NewSink() *Sink {
	s := &Sink{}
	s.mu.high = make(map[string]uint32)
	return s
}

// Offer offers task's effect under claim and reports whether the sink
// took it. An equal claim id is taken again: a worker may repeat its own
// effect (it does not know whether the first reached the sink).
func (s *Sink) Offer(task string, claim uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.mu.high[task]; ok && h > claim {
		return false
	}
	s.mu.high[task] = claim
	return true
}

// Len returns the number of tasks the sink took an effect of.
func (s *Sink) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.high)
}
