package faults

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

// What the recorder writes, ReadHistory reads back the same, with
// indexes in recording order.
func TestHistoryRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), HistoryFile)
	rec, err := CreateRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	var observed []int64
	rec.Observe(func(e Event) { observed = append(observed, e.Index) })
	c, seq, yes := uint32(2), uint64(3), true
	want := []Event{
		{Proc: -1, Type: Phase, F: PhaseSetup, TNs: 1},
		{Proc: 0, Type: Invoke, F: FEnqueue, TNs: 10, Node: 3, Task: "00000001", Value: "p", Deps: []string{"d"}, MaxAttempts: 5, Queue: "q"},
		{Proc: 0, Type: OK, F: FClaim, TNs: 20, Node: 1, Task: "t", Claim: &c, Epoch: 7, End: 99, TTLMs: 2000, Attempts: 1},
		{Proc: 4, Type: Info, F: FUpdate, TNs: 30, Claim: &c, Seq: &seq, Code: "timeout", Err: "deadline"},
		{Proc: -1, Type: Nemesis, F: "start", TNs: 40, Nemesis: NemPartitionOne, Targets: []int{2}, Detail: json.RawMessage(`{"x":1}`)},
		{Proc: 4, Type: Effect, F: Effect, TNs: 50, Task: "t", Claim: &c, Accepted: &yes},
	}
	for i, e := range want {
		got := rec.Record(e)
		if got.Index != int64(i) {
			t.Fatalf("event %d recorded as index %d", i, got.Index)
		}
		want[i].Index = int64(i)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back:\n%+v\nwant:\n%+v", got, want)
	}
	if !reflect.DeepEqual(observed, []int64{0, 1, 2, 3, 4, 5}) {
		t.Errorf("observed %v", observed)
	}
}

// Concurrent recorders' events get distinct, dense indexes.
func TestRecorderConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), HistoryFile)
	rec, err := CreateRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for range each {
				rec.Record(Event{Proc: w, Type: Invoke, F: FClaim})
			}
		})
	}
	wg.Wait()
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*each {
		t.Fatalf("%d events; want %d", len(got), writers*each)
	}
	for i, e := range got {
		if e.Index != int64(i) {
			t.Fatalf("line %d has index %d", i, e.Index)
		}
	}
}

func TestFinalRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), FinalFile)
	w, err := CreateJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []FinalRead{
		{Task: "a", Node: 1, TNs: 5, Found: true, View: json.RawMessage(`{"id":"a","state":"completed"}`)},
		{Task: "a", Node: 2, TNs: 6},
		{Task: "b", Node: 3, TNs: 7, Err: "timeout"},
	}
	for i := range want {
		w.Write(&want[i])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFinal(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v; want %+v", got, want)
	}
	ri := RunInfo{Seed: 3, Nodes: 5, Addrs: []string{"10.77.0.1:13000"}, BeyondBounds: []string{NemClockBeyond}}
	rp := filepath.Join(t.TempDir(), RunInfoFile)
	if err := WriteJSONFile(rp, ri); err != nil {
		t.Fatal(err)
	}
	if back, err := ReadRunInfo(rp); err != nil || !reflect.DeepEqual(back, ri) {
		t.Errorf("run info read back %+v, %v; want %+v", back, err, ri)
	}
}
