package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The worker protocol, without a process: RunWorker reads its config
// from the first line, writes events, holding notices and offers, waits
// for each offer's answer, and stops when told.
func TestWorkerProtocol(t *testing.T) {
	fake := newFakeNode()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- RunWorker(context.Background(), inR, outW)
		outW.Close()
	}()
	cfg := testLoopConfig(strings.TrimPrefix(srv.URL, "http://"))
	b, _ := json.Marshal(&cfg)
	if _, err := inW.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	sink := NewSink()
	var events, offers, holds int
	sc := bufio.NewScanner(outR)
	deadline := time.Now().Add(10 * time.Second)
	stopped := false
	for sc.Scan() {
		var m workerMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		switch {
		case m.Event != nil:
			events++
			if m.Event.Proc%cfg.ProcStride != cfg.Loop {
				t.Fatalf("event of proc %d from loop %d", m.Event.Proc, cfg.Loop)
			}
		case m.Offer != nil:
			offers++
			ok := sink.Offer(m.Offer.Task, m.Offer.Claim)
			ans, _ := json.Marshal(parentMsg{Accepted: &ok, Task: m.Offer.Task, Claim: m.Offer.Claim})
			if _, err := inW.Write(append(ans, '\n')); err != nil {
				t.Fatal(err)
			}
		case m.Holding != nil:
			holds++
		}
		if !stopped && (offers >= 10 || time.Now().After(deadline)) {
			stopped = true
			stop, _ := json.Marshal(parentMsg{Stop: true})
			if _, err := inW.Write(append(stop, '\n')); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("RunWorker: %v", err)
	}
	if offers < 10 || events == 0 || holds == 0 {
		t.Errorf("%d events, %d offers, %d holding notices; want some of each and 10 offers", events, offers, holds)
	}
}

// A sink's answer that comes after the stop still reaches the loop: the
// offer it made just before the stop is answered, and the loop finishes
// its operation (the reader once stopped reading at the stop, and such a
// worker waited until the harness killed it).
func TestParentReaderReadsPastTheStop(t *testing.T) {
	pr := newParentReader()
	yes := true
	stop, _ := json.Marshal(parentMsg{Stop: true})
	ans, _ := json.Marshal(parentMsg{Accepted: &yes, Task: "t", Claim: 2})
	pr.read(strings.NewReader(string(stop) + "\n" + string(ans) + "\n"))
	select {
	case <-pr.stop:
	default:
		t.Error("stop not closed")
	}
	select {
	case a := <-pr.answers:
		if a != (answer{task: "t", claim: 2, ok: true}) {
			t.Errorf("answer %+v; want yes to task t claim 2", a)
		}
	default:
		t.Error("the answer after the stop was dropped")
	}
	select {
	case <-pr.closed:
	default:
		t.Error("closed not closed at the end of stdin")
	}
}

// An answer that comes after its offer gave up waiting does not answer
// the next offer: the worker would go on to complete a task before the
// harness recorded its effect.
func TestOfferSkipsALateAnswer(t *testing.T) {
	answers := make(chan answer, 2)
	answers <- answer{task: "a", claim: 1, ok: false} // a's, late
	answers <- answer{task: "b", claim: 1, ok: true}
	var out strings.Builder
	em := &pipeEmitter{w: bufio.NewWriter(&out), answers: answers, closed: make(chan struct{})}
	ok, err := em.Offer(3, "b", 1)
	if err != nil || !ok {
		t.Fatalf("Offer(b) = %v, %v; want b's answer, yes", ok, err)
	}
	if !strings.Contains(out.String(), `"task":"b"`) {
		t.Errorf("offer line %q does not name task b", out.String())
	}
}
