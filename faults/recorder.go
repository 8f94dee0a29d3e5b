package faults

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Files of a run's output directory that the checkers read.
const (
	HistoryFile = "history.jsonl"
	FinalFile   = "final.jsonl"
	RunInfoFile = "run.json"
	SummaryFile = "summary.json"
	// LeadersFile holds the Leadership records the harness read from the
	// nodes' logs after the run; optional.
	LeadersFile = "leaders.jsonl"
)

// maxLine bounds one JSON line read back from a history or final-reads
// file (or from a worker): a task view with its claims and updates is a
// few kB; a line over this is corrupt, not large.
const maxLine = 4 << 20

// lineBufSize is a line reader's first buffer: most lines (events, task
// views) fit, and it grows up to maxLine for the rest.
const lineBufSize = 64 << 10

// Recorder writes the history: it gives each event its Index, in the
// order Record is called, and writes it as one JSON line. Observers see
// every event after it is written, in the same order. Safe for concurrent
// use; observers are called with the recorder's lock held, one at a time,
// and must not call Record.
type Recorder struct {
	mu struct {
		sync.Mutex
		f         *os.File
		w         *bufio.Writer
		next      int64
		err       error
		observers []func(Event)
	}
}

// CreateRecorder creates (truncates) the history file at path.
func CreateRecorder(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	r := &Recorder{}
	r.mu.f, r.mu.w = f, bufio.NewWriter(f)
	return r, nil
}

// Observe adds fn to the functions called with every recorded event.
func (r *Recorder) Observe(fn func(Event)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.observers = append(r.mu.observers, fn)
}

// Record assigns e its Index, writes it, and returns it as written. The
// line is flushed at once, so a harness that dies leaves its history up
// to its last event. A write error is kept and returned by Close; the
// events still reach the observers.
func (r *Recorder) Record(e Event) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Index = r.mu.next
	r.mu.next++
	if r.mu.err == nil {
		b, err := json.Marshal(&e)
		if err == nil {
			b = append(b, '\n')
			_, err = r.mu.w.Write(b)
		}
		if err == nil {
			err = r.mu.w.Flush()
		}
		if err != nil {
			r.mu.err = fmt.Errorf("history: write event %d: %w", e.Index, err)
		}
	}
	for _, fn := range r.mu.observers {
		fn(e)
	}
	return e
}

// Len returns the number of events recorded.
func (r *Recorder) Len() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.next
}

// Close flushes and closes the file; it returns the first write error.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.f == nil {
		return r.mu.err
	}
	err := errors.Join(r.mu.err, r.mu.w.Flush(), r.mu.f.Sync(), r.mu.f.Close())
	r.mu.f = nil
	return err
}

// ReadHistory reads a history file written by a Recorder.
func ReadHistory(path string) ([]Event, error) {
	var events []Event
	err := readJSONLines(path, func(line []byte) error {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		events = append(events, e)
		return nil
	})
	return events, err
}

// ReadFinal reads a final-reads file.
func ReadFinal(path string) ([]FinalRead, error) {
	var reads []FinalRead
	err := readJSONLines(path, func(line []byte) error {
		var fr FinalRead
		if err := json.Unmarshal(line, &fr); err != nil {
			return err
		}
		reads = append(reads, fr)
		return nil
	})
	return reads, err
}

// readJSONLines calls fn with each non-empty line of the file at path.
func readJSONLines(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	return scanJSONLines(f, path, fn)
}

func scanJSONLines(rd io.Reader, name string, fn func([]byte) error) error {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, lineBufSize), maxLine)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return fmt.Errorf("%s line %d: %w", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// JSONLWriter appends values as JSON lines to a file (final.jsonl). Safe
// for concurrent use.
type JSONLWriter struct {
	mu struct {
		sync.Mutex
		f   *os.File
		w   *bufio.Writer
		err error
	}
}

// CreateJSONL creates (truncates) the file at path.
func CreateJSONL(path string) (*JSONLWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	w := &JSONLWriter{}
	w.mu.f, w.mu.w = f, bufio.NewWriter(f)
	return w, nil
}

// Write appends v as one line; the first error is kept for Close.
func (w *JSONLWriter) Write(v any) {
	b, err := json.Marshal(v)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err != nil {
		return
	}
	if err == nil {
		_, err = w.mu.w.Write(append(b, '\n'))
	}
	if err != nil {
		w.mu.err = fmt.Errorf("write %s: %w", w.mu.f.Name(), err)
	}
}

// Close flushes and closes the file.
func (w *JSONLWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.f == nil {
		return w.mu.err
	}
	err := errors.Join(w.mu.err, w.mu.w.Flush(), w.mu.f.Sync(), w.mu.f.Close())
	w.mu.f = nil
	return err
}

// WriteJSONFile writes v, indented, to path.
func WriteJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadRunInfo reads run.json.
func ReadRunInfo(path string) (RunInfo, error) {
	var ri RunInfo
	b, err := os.ReadFile(path)
	if err != nil {
		return ri, fmt.Errorf("read run info: %w", err)
	}
	if err := json.Unmarshal(b, &ri); err != nil {
		return ri, fmt.Errorf("run info %s: %w", path, err)
	}
	return ri, nil
}
