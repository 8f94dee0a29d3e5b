package faults

import "testing"

func TestSink(t *testing.T) {
	s := NewSink()
	steps := []struct {
		task  string
		claim uint32
		want  bool
	}{
		{"a", 1, true},  // first effect
		{"a", 1, true},  // the same claim again: a worker repeating itself
		{"a", 0, false}, // an older claim after a newer one took effect: fenced
		{"a", 3, true},  // a newer claim
		{"a", 2, false},
		{"b", 0, true}, // another task is independent
		{"a", 3, true},
	}
	for i, st := range steps {
		if got := s.Offer(st.task, st.claim); got != st.want {
			t.Errorf("step %d: Offer(%s, %d) = %v; want %v", i, st.task, st.claim, got, st.want)
		}
	}
	if s.Len() != 2 {
		t.Errorf("Len = %d; want 2", s.Len())
	}
}
