package retrying

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// fakeNode answers each call with the next error of its script (nil:
// success), counting the calls.
type fakeNode struct {
	wire.Service // the methods a test does not call
	script       []error
	calls        int
	stopping     bool
	// out, if set, is what Unreachable answers; needs records what it
	// was asked.
	out   error
	needs []Need
}

func (f *fakeNode) Unreachable(n Need) error {
	f.needs = append(f.needs, n)
	return f.out
}

func (f *fakeNode) next() error {
	f.calls++
	if len(f.script) == 0 {
		return nil
	}
	err := f.script[0]
	f.script = f.script[1:]
	return err
}

func (f *fakeNode) Stopping() bool { return f.stopping }

func (f *fakeNode) StampIDs(*wire.EnqueueRequest) error { return nil }

func (f *fakeNode) Get(context.Context, *wire.GetRequest) (*wire.TaskView, error) {
	return &wire.TaskView{}, f.next()
}

func (f *fakeNode) Update(context.Context, *wire.UpdateRequest) (*wire.Ack, error) {
	return &wire.Ack{}, f.next()
}

func (f *fakeNode) Fail(context.Context, *wire.FailRequest) (*wire.Ack, error) {
	return &wire.Ack{}, f.next()
}

func (f *fakeNode) List(_ context.Context, _ *wire.ListRequest, emit func(*wire.ListPage) error) error {
	if err := emit(&wire.ListPage{}); err != nil {
		return err
	}
	return f.next()
}

func (f *fakeNode) Enqueue(_ context.Context, req *wire.EnqueueRequest) (*wire.EnqueueResponse, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	// The key is held by another task: a duplicate of it.
	return &wire.EnqueueResponse{Results: []wire.EnqueueResult{{ID: task.ID{9}, Acks: 2, Duplicate: true}}}, nil
}

var unavailable = wire.Errorf(wire.CodeUnavailable, "no leader")

// TestDuplicateAfterDoubt: an enqueue whose key another task holds is
// answered as its duplicate, unless an earlier attempt ended in doubt:
// that attempt may have created the task (a stale leader's own replica
// took it), so "not created" is no longer known, and the answer is in
// doubt (the simulation, seed 644434843489388993: the task existed,
// retired, after its enqueue was answered duplicate).
func TestDuplicateAfterDoubt(t *testing.T) {
	ctx := context.Background()
	id := task.ID{1}
	req := func() *wire.EnqueueRequest {
		return &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &id, Queue: "q", Key: "k"}}}
	}
	f := &fakeNode{}
	if r, err := New(f).Enqueue(ctx, req()); err != nil || !r.Results[0].Duplicate {
		t.Fatalf("first attempt duplicate = %+v, %v; want the duplicate", r, err)
	}
	f = &fakeNode{script: []error{unavailable}}
	if r, err := New(f).Enqueue(ctx, req()); !errors.Is(err, wire.ErrUnavailable) || f.calls != 2 {
		t.Fatalf("duplicate after a doubtful attempt = %+v, %v (%d calls); want unavailable", r, err, f.calls)
	}
}

// TestRetryPolicy: reads and safe writes are retried past transient
// errors; a write whose earlier attempt ended in doubt answers a later
// refusal as unavailable; fail is never retried; a list is not retried
// once it emitted a page; a stopping node does not retry.
func TestRetryPolicy(t *testing.T) {
	ctx := context.Background()
	conflict := wire.Errorf(wire.CodeConflict, "other data")

	f := &fakeNode{script: []error{unavailable, unavailable}}
	if _, err := New(f).Get(ctx, &wire.GetRequest{}); err != nil || f.calls != 3 {
		t.Errorf("get = %v after %d calls; want success on the third", err, f.calls)
	}

	f = &fakeNode{script: []error{unavailable, conflict}}
	_, err := New(f).Update(ctx, &wire.UpdateRequest{})
	if !errors.Is(err, wire.ErrUnavailable) || errors.Is(err, task.ErrConflict) || f.calls != 2 {
		t.Errorf("update after a doubtful attempt = %v (%d calls); want unavailable, not conflict", err, f.calls)
	}

	f = &fakeNode{script: []error{conflict}}
	if _, err := New(f).Update(ctx, &wire.UpdateRequest{}); !errors.Is(err, task.ErrConflict) || f.calls != 1 {
		t.Errorf("update refused at once = %v (%d calls); want the refusal", err, f.calls)
	}

	f = &fakeNode{script: []error{unavailable}}
	if _, err := New(f).Fail(ctx, &wire.FailRequest{}); !errors.Is(err, wire.ErrUnavailable) || f.calls != 1 {
		t.Errorf("fail = %v after %d calls; want unavailable, not retried", err, f.calls)
	}

	f = &fakeNode{script: []error{unavailable}}
	if err := New(f).List(ctx, &wire.ListRequest{}, func(*wire.ListPage) error { return nil }); !errors.Is(err, wire.ErrUnavailable) || f.calls != 1 {
		t.Errorf("list = %v after %d calls; want unavailable once a page went out", err, f.calls)
	}

	f = &fakeNode{script: []error{unavailable}, stopping: true}
	if _, err := New(f).Get(ctx, &wire.GetRequest{}); !errors.Is(err, wire.ErrUnavailable) || f.calls != 1 {
		t.Errorf("get on a stopping node = %v after %d calls; want no retry", err, f.calls)
	}
}

// TestUnreachableEndsRetries: a request that failed for a while is
// answered at once, as unavailable with the reason, when what it needs is
// out of reach (Host.Unreachable), instead of after the whole retry time;
// while it may be reached, it is retried. An op on tasks asks for their
// partitions.
func TestUnreachableEndsRetries(t *testing.T) {
	ctx := context.Background()
	why := errors.New("partition 7 has 1 of its 3 replicas within this node's reach (a:1, b:1 not answering); it needs a majority")
	id := task.ID{4}
	f := &fakeNode{script: []error{unavailable, unavailable, unavailable}, out: why}
	_, err := New(f).Get(ctx, &wire.GetRequest{ID: id})
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), why.Error()) || f.calls != 1 {
		t.Fatalf("get with its partition out of reach = %v after %d calls; want unavailable at once, saying why", err, f.calls)
	}
	if len(f.needs) != 1 || !slices.Equal(f.needs[0].IDs, []task.ID{id}) {
		t.Errorf("get asked for %+v; want its task's partition", f.needs)
	}
	f = &fakeNode{script: []error{unavailable, unavailable}}
	if _, err := New(f).Get(ctx, &wire.GetRequest{ID: id}); err != nil || f.calls != 3 {
		t.Errorf("get in reach = %v after %d calls; want success on the third", err, f.calls)
	}
	f = &fakeNode{script: []error{unavailable}, out: why}
	if _, err := New(f).Enqueue(ctx, &wire.EnqueueRequest{Tasks: []wire.EnqueueTask{{ID: &id, Queue: "q"}}}); !strings.Contains(fmt.Sprint(err), "partition 7") ||
		len(f.needs) != 1 || !slices.Equal(f.needs[0].IDs, []task.ID{id}) {
		t.Errorf("enqueue = %v, needs %+v; want unavailable naming the partition, asked for its task's", err, f.needs)
	}
}
