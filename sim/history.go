package sim

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/skuldd/skuldd/faults"
)

// recorder keeps the history in memory, in the fault suite's format
// (faults.Event), with times from the bubble's virtual clock: the one
// real-time reference every node shares. Safe for concurrent use.
type recorder struct {
	start   time.Time
	mu      sync.Mutex
	events  []faults.Event
	finals  []faults.FinalRead
	leaders []faults.Leadership
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

// now is the virtual time since the run began, in ns.
func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

// record appends e with its index and time and returns it.
func (r *recorder) record(e faults.Event) faults.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Index = int64(len(r.events))
	e.TNs = r.now()
	r.events = append(r.events, e)
	return e
}

// phase records the run moving on.
func (r *recorder) phase(name string, detail any) {
	e := faults.Event{Proc: -1, Type: faults.Phase, F: name}
	if detail != nil {
		e.Detail, _ = json.Marshal(detail)
	}
	r.record(e)
}

// nemesis records a fault starting ("start") or healing ("stop").
func (r *recorder) nemesis(f string, ft fault) {
	detail, _ := json.Marshal(ft)
	r.record(faults.Event{Proc: -1, Type: faults.Nemesis, F: f, Nemesis: ft.Kind.String(), Targets: ft.targets(), Detail: detail})
}

func (r *recorder) final(fr faults.FinalRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fr.TNs = r.now()
	r.finals = append(r.finals, fr)
}

// leading records that a node started leading a partition at an epoch.
func (r *recorder) leading(l faults.Leadership) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.TNs = r.now()
	r.leaders = append(r.leaders, l)
}

// input returns the run for the checkers.
func (r *recorder) input(info faults.RunInfo) *faults.Input {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &faults.Input{Run: info, Events: r.events, Finals: r.finals, Leaders: r.leaders}
}
