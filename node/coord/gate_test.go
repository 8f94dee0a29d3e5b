package coord

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

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
