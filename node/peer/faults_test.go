package peer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/skuldd/skuldd/internal/testkit"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// faultPair is two nodes on a MemNet, each with its Faults around its
// transport and handlers: a sends, b counts what it served by op.
type faultPair struct {
	fa, fb *Faults
	a, b   Transport
	served map[wire.Op]*atomic.Int64
	// onServe, when set, is told of each op b serves, in order.
	onServe func(wire.Op)
}

func newFaultPair(t *testing.T) *faultPair {
	t.Helper()
	net := NewMemNet()
	p := &faultPair{fa: NewFaults(), fb: NewFaults(), served: map[wire.Op]*atomic.Int64{}}
	mux := NewMux()
	for _, op := range []wire.Op{wire.OpReplicate, wire.OpAAENodes, wire.OpRaft, wire.OpEnqueue, wire.OpPing} {
		p.served[op] = new(atomic.Int64)
		mux.HandleFunc(op, func(_ context.Context, req *wire.Request, w wire.ResponseWriter) {
			p.served[req.Op].Add(1)
			if p.onServe != nil {
				p.onServe(req.Op)
			}
			_ = w.Reply(nil)
		})
	}
	mux.HandleFunc(wire.OpExport, func(_ context.Context, req *wire.Request, w wire.ResponseWriter) {
		for range 5 {
			if err := w.Send(&wire.ExportPage{Records: make([]task.Record, 3), Epoch: 1}); err != nil {
				return
			}
		}
		_ = w.Reply(&wire.ExportPage{Done: true})
	})
	raw := func(_ context.Context, rs wire.RawStream) { _ = rs.Close() }
	ea, err := net.Attach("a:1", 1, p.fa.WrapHandlers(Handlers{Peer: NewMux(), Raw: raw}))
	if err != nil {
		t.Fatal(err)
	}
	eb, err := net.Attach("b:2", 2, p.fb.WrapHandlers(Handlers{Peer: mux, Raw: raw}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ea.Close(); _ = eb.Close() })
	p.a, p.b = p.fa.Wrap(ea), p.fb.Wrap(eb)
	return p
}

func (p *faultPair) dial(t *testing.T) Conn {
	t.Helper()
	c, err := p.a.Dial(context.Background(), "b:2")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Block cuts a link both ways, for connections made before it too.
func TestFaultsBlock(t *testing.T) {
	p := newFaultPair(t)
	ctx := context.Background()
	c := p.dial(t)
	if err := c.Call(ctx, wire.OpRaft, nil, nil); err != nil {
		t.Fatal(err)
	}
	p.fa.Block("b:2")
	if err := c.Call(ctx, wire.OpRaft, nil, nil); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("call over a blocked link: %v; want unavailable", err)
	}
	if _, err := c.OpenRaw(ctx, wire.RawGossip); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("raw stream over a blocked link: %v; want unavailable", err)
	}
	if _, err := p.a.Dial(ctx, "b:2"); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("dial over a blocked link: %v; want unavailable", err)
	}
	if n := p.served[wire.OpRaft].Load(); n != 1 {
		t.Fatalf("b served %d raft requests; want only the one before the block", n)
	}
	// The receiving side refuses too: b blocks a, a does not block b.
	p.fa.Heal()
	p.fb.Block("a:1")
	if err := c.Call(ctx, wire.OpRaft, nil, nil); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("call to a node that blocks the caller: %v; want unavailable", err)
	}
	if n := p.served[wire.OpRaft].Load(); n != 1 {
		t.Fatalf("b served %d raft requests; want it to refuse a blocked caller", n)
	}
	p.fb.Heal()
	if err := c.Call(ctx, wire.OpRaft, nil, nil); err != nil {
		t.Fatalf("call after heal: %v", err)
	}
}

// DropReplication drops the replication ops only.
func TestFaultsDropReplication(t *testing.T) {
	p := newFaultPair(t)
	ctx := context.Background()
	c := p.dial(t)
	p.fa.DropReplication("b:2")
	for op, dropped := range map[wire.Op]bool{wire.OpReplicate: true, wire.OpAAENodes: true, wire.OpRaft: false, wire.OpEnqueue: false} {
		err := c.Call(ctx, op, nil, nil)
		if dropped != errors.Is(err, wire.ErrUnavailable) || p.served[op].Load() == 0 == !dropped {
			t.Errorf("%v: %v, served %d; want dropped=%v", op, err, p.served[op].Load(), dropped)
		}
	}
}

// DropOp drops one op one way.
func TestFaultsDropOp(t *testing.T) {
	p := newFaultPair(t)
	ctx := context.Background()
	c := p.dial(t)
	p.fa.DropOp("b:2", wire.OpRaft)
	if err := c.Call(ctx, wire.OpRaft, nil, nil); !errors.Is(err, wire.ErrUnavailable) || p.served[wire.OpRaft].Load() != 0 {
		t.Fatalf("dropped op: %v, served %d; want dropped", err, p.served[wire.OpRaft].Load())
	}
	if err := c.Call(ctx, wire.OpPing, nil, nil); err != nil {
		t.Fatalf("another op: %v", err)
	}
	p.fa.Heal()
	if err := c.Call(ctx, wire.OpRaft, nil, nil); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

// Cut drops what one side sends, one way: the other side's requests still
// arrive and are answered.
func TestFaultsCut(t *testing.T) {
	p := newFaultPair(t)
	ctx := context.Background()
	c := p.dial(t)
	p.fb.Cut("a:1") // b sends a nothing; a still reaches b
	if err := c.Call(ctx, wire.OpRaft, nil, nil); err != nil {
		t.Fatalf("a to b, with b's sends cut: %v; want it served and answered", err)
	}
	back, err := p.b.Dial(ctx, "a:1")
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("b dials a over its cut: %v, %v; want unavailable", back, err)
	}
	p.fb.Heal()
	p.fa.Cut("b:2")
	if err := c.Call(ctx, wire.OpRaft, nil, nil); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("a to b over a's cut: %v; want unavailable", err)
	}
	if n := p.served[wire.OpRaft].Load(); n != 1 {
		t.Fatalf("b served %d raft requests; want the one before the cut", n)
	}
}

// Duplicate delivers each request twice and answers the caller once.
func TestFaultsDuplicate(t *testing.T) {
	p := newFaultPair(t)
	ctx := context.Background()
	c := p.dial(t)
	p.fa.Duplicate("b:2")
	if err := c.Call(ctx, wire.OpReplicate, nil, nil); err != nil {
		t.Fatal(err)
	}
	var resp wire.PingResponse
	if err := c.Call(ctx, wire.OpPing, nil, &resp); err != nil {
		t.Fatal(err)
	}
	for _, op := range []wire.Op{wire.OpReplicate, wire.OpPing} {
		if n := p.served[op].Load(); n != 2 {
			t.Errorf("%v served %d times; want 2 (the request and its copy)", op, n)
		}
	}
	p.fa.Delay("c:3", time.Hour) // another link's fault stays
	p.fa.HealAddr("b:2")
	if err := c.Call(ctx, wire.OpReplicate, nil, nil); err != nil || p.served[wire.OpReplicate].Load() != 3 {
		t.Fatalf("after heal: %v, served %d; want once more", err, p.served[wire.OpReplicate].Load())
	}
	if p.fa.delay["c:3"] != time.Hour {
		t.Fatal("HealAddr of one address healed another's fault")
	}
}

// Reorder delays each request by its own draw below the bound, in
// virtual time: two requests sent in order arrive in the other when the
// first draw is the longer, and a seed fixes the draws.
func TestFaultsReorder(t *testing.T) {
	const max = 100 * time.Millisecond
	// A seed whose first draw is longer than its second.
	seed := uint64(0)
	for ; ; seed++ {
		f := NewFaults()
		f.Seed(seed)
		if d1, d2 := f.rng.Int64N(int64(max)), f.rng.Int64N(int64(max)); d1 > d2 {
			break
		}
	}
	synctest.Test(t, func(t *testing.T) {
		p := newFaultPair(t)
		ctx := context.Background()
		c := p.dial(t)
		var order []wire.Op
		var mu sync.Mutex
		p.onServe = func(op wire.Op) { mu.Lock(); order = append(order, op); mu.Unlock() }
		p.fa.Seed(seed)
		p.fa.Reorder("b:2", max)
		began := time.Now()
		done := make(chan error, 2)
		go func() { done <- c.Call(ctx, wire.OpRaft, nil, nil) }()
		synctest.Wait() // the first is sleeping its draw
		go func() { done <- c.Call(ctx, wire.OpReplicate, nil, nil) }()
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if took := time.Since(began); took >= max {
			t.Fatalf("both took %v; each is delayed less than %v", took, max)
		}
		if want := []wire.Op{wire.OpReplicate, wire.OpRaft}; !slices.Equal(order, want) {
			t.Fatalf("served in order %v; want %v (the second overtook the first)", order, want)
		}
	})
}

// LoseReplies serves forwarded client requests and loses their answers;
// peer ops and the drift check's pings are untouched.
func TestFaultsLoseReplies(t *testing.T) {
	p := newFaultPair(t)
	ctx := context.Background()
	c := p.dial(t)
	p.fa.LoseReplies("b:2")
	if err := c.Call(ctx, wire.OpEnqueue, nil, nil); !errors.Is(err, wire.ErrUnavailable) || p.served[wire.OpEnqueue].Load() != 1 {
		t.Fatalf("forwarded enqueue: %v, served %d; want served once and its answer lost", err, p.served[wire.OpEnqueue].Load())
	}
	for _, op := range []wire.Op{wire.OpRaft, wire.OpPing} {
		if err := c.Call(ctx, op, nil, nil); err != nil {
			t.Fatalf("%v: %v; want its answer", op, err)
		}
	}
}

// CutTransfers breaks each transfer once, after the pages it names, and
// counts what the puller took.
func TestFaultsCutTransfers(t *testing.T) {
	p := newFaultPair(t)
	ctx := context.Background()
	c := p.dial(t)
	p.fa.CutTransfers(2)
	pull := func() (int, error) {
		pages := 0
		err := c.Stream(ctx, wire.OpExport, &wire.ExportRequest{Part: 3}, func(cbor.RawMessage) error { pages++; return nil })
		return pages, err
	}
	if pages, err := pull(); !errors.Is(err, wire.ErrUnavailable) || pages != 2 {
		t.Fatalf("first transfer: %d pages, %v; want cut after 2", pages, err)
	}
	if pages, err := pull(); err != nil || pages != 6 {
		t.Fatalf("second transfer: %d pages, %v; want all 5 and the last", pages, err)
	}
	got := p.fa.Transfers()["b:2/3"]
	if want := (TransferFault{Pages: 7, Records: 21, Cut: true}); got != want {
		t.Fatalf("transfers: %+v; want %+v (the final empty page not counted)", got, want)
	}
}

// Freeze holds what passes Gate until Thaw.
func TestFaultsFreeze(t *testing.T) {
	f := NewFaults()
	if err := f.Gate(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.Freeze()
	passed := make(chan error, 1)
	go func() { passed <- f.Gate(context.Background()) }()
	testkit.WaitFor(t, 10*time.Second, testkit.Cond("one request held at the gate", func() bool { return f.Held() == 1 }))
	select {
	case err := <-passed:
		t.Fatalf("passed the gate while frozen: %v", err)
	default:
	}
	f.Heal() // does not thaw
	if f.Held() != 1 {
		t.Fatal("Heal released a frozen request")
	}
	f.Thaw()
	if err := <-passed; err != nil {
		t.Fatal(err)
	}
	// A nil Faults injects nothing.
	var none *Faults
	if err := none.Gate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if none.Wrap(p0{}) != (p0{}) {
		t.Fatal("a nil Faults wrapped the transport")
	}
}

// p0 is a Transport that dials nothing.
type p0 struct{}

func (p0) Dial(context.Context, string) (Conn, error) { return nil, errors.New("p0") }

// HoldOp holds one op's requests to one address until ReleaseOps or the
// caller gives up; other ops pass, and closing the connection does not
// end the wait.
func TestFaultsHoldOp(t *testing.T) {
	p := newFaultPair(t)
	c := p.dial(t)
	p.fa.HoldOp("b:2", wire.OpEnqueue)
	if err := c.Call(context.Background(), wire.OpPing, nil, nil); err != nil {
		t.Fatalf("another op: %v", err)
	}
	passed := make(chan error, 1)
	go func() { passed <- c.Call(context.Background(), wire.OpEnqueue, nil, nil) }()
	testkit.WaitFor(t, 10*time.Second, testkit.Cond("one request held", func() bool { return p.fa.HeldOps() == 1 }))
	_ = c.Close()
	p.fa.Heal() // does not release
	select {
	case err := <-passed:
		t.Fatalf("a held request went on: %v", err)
	default:
	}
	if p.served[wire.OpEnqueue].Load() != 0 {
		t.Fatal("a held request was served")
	}
	// A caller whose context ends stops waiting.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	c2 := p.dial(t)
	go func() { gaveUp <- c2.Call(ctx, wire.OpEnqueue, nil, nil) }()
	testkit.WaitFor(t, 10*time.Second, testkit.Cond("two requests held", func() bool { return p.fa.HeldOps() == 2 }))
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller: %v; want context.Canceled", err)
	}
	p.fa.ReleaseOps()
	<-passed // went on to its closed connection
	if err := p.dial(t).Call(context.Background(), wire.OpEnqueue, nil, nil); err != nil || p.fa.HeldOps() != 0 {
		t.Fatalf("after release: %v, %d held", err, p.fa.HeldOps())
	}
}
