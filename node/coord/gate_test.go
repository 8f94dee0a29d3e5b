package coord

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/skuldd/skuldd/wire"
)

// close refuses new ops, ends the contexts of those in flight, and
// returns only once each has exited.
func TestGateCloseWaitsForOpsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		ctx, exit, err := g.enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		go func() {
			g.close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("close returned with an op in flight")
		default:
		}
		if ctx.Err() == nil {
			t.Fatal("the op's context lives on once close began")
		}
		if _, _, err := g.enter(context.Background()); !errors.Is(err, wire.ErrShuttingDown) {
			t.Fatalf("enter while closing: %v; want shutting down", err)
		}
		exit()
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("close did not return once the op exited")
		}
	})
}

// An op that exits before close leaves nothing behind: its context is
// done, and close does not wait for it.
func TestGateExitBeforeClose(t *testing.T) {
	g := newGate()
	ctx, exit, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	exit()
	if ctx.Err() == nil {
		t.Fatal("an op's context lives on after it exited")
	}
	g.close()
	g.close() // twice is harmless
}

// An op's context ends when the plane closes, when its own context ends
// and when the op exits, whether something asked for Done before that
// (joining the two contexts then) or only after.
func TestGateOpContextEnds(t *testing.T) {
	type ender int
	const (
		byClose ender = iota
		byParent
		byExit
	)
	for _, tc := range []struct {
		name      string
		end       ender
		doneFirst bool // Done asked for before the end
		want      error
	}{
		{"close, Done asked before", byClose, true, context.Canceled},
		{"close, Done asked after", byClose, false, context.Canceled},
		{"parent's deadline, Done asked before", byParent, true, context.DeadlineExceeded},
		{"parent's deadline, Done asked after", byParent, false, context.DeadlineExceeded},
		{"exit, Done asked before", byExit, true, context.Canceled},
		{"exit, Done asked after", byExit, false, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newGate()
				parent, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				ctx, exit, err := g.enter(parent)
				if err != nil {
					t.Fatal(err)
				}
				if tc.doneFirst {
					select {
					case <-ctx.Done():
						t.Fatal("the op's context is done before anything ended it")
					default:
					}
				}
				if ctx.Err() != nil {
					t.Fatalf("Err before the end: %v", ctx.Err())
				}
				closed := make(chan struct{})
				switch tc.end {
				case byClose:
					go func() { g.close(); close(closed) }()
					synctest.Wait()
				case byParent:
					time.Sleep(time.Hour)
					synctest.Wait()
				case byExit:
					exit()
				}
				if err := ctx.Err(); !errors.Is(err, tc.want) {
					t.Fatalf("Err = %v; want %v", err, tc.want)
				}
				select {
				case <-ctx.Done():
				default:
					t.Fatal("Done is not closed once the context ended")
				}
				if err := ctx.Err(); !errors.Is(err, tc.want) {
					t.Fatalf("Err once Done was asked for = %v; want %v", err, tc.want)
				}
				if tc.end != byExit {
					exit()
				}
				if tc.end == byClose {
					<-closed
				}
			})
		})
	}
}

// A context derived from an op's (a forward's timeout, a hook) ends
// when the plane closes, and sees the op's values and deadline.
func TestGateOpContextDerived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		g := newGate()
		deadline := time.Now().Add(time.Hour)
		parent, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), deadline)
		defer cancel()
		ctx, exit, err := g.enter(parent)
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := ctx.Deadline(); !ok || !d.Equal(deadline) {
			t.Fatalf("Deadline = %v, %v; want the parent's %v", d, ok, deadline)
		}
		child, ccancel := context.WithTimeout(ctx, 2*time.Hour)
		defer ccancel()
		hooked := false
		context.AfterFunc(ctx, func() { hooked = true })
		if v := child.Value(key{}); v != "v" {
			t.Fatalf("the derived context's value = %v; want the parent's", v)
		}
		closed := make(chan struct{})
		go func() { g.close(); close(closed) }()
		synctest.Wait()
		if !errors.Is(child.Err(), context.Canceled) || !errors.Is(context.Cause(child), context.Canceled) {
			t.Fatalf("derived context after close: Err %v, Cause %v; want canceled", child.Err(), context.Cause(child))
		}
		if !hooked {
			t.Fatal("a function hooked to the op's context did not run on close")
		}
		exit()
		<-closed
	})
}
