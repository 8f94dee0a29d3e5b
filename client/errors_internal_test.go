package client

import (
	"errors"
	"io"
	"testing"

	"github.com/skuldd/skuldd/wire"
)

// TestNotRetriedStaysUnavailable: an error a call must not retry (a
// listing that already yielded tasks) still says what it is: a transport
// error matches ErrUnavailable, a node's refusal does not.
func TestNotRetriedStaysUnavailable(t *testing.T) {
	lost := &Error{Op: "list", Err: notRetried{io.ErrUnexpectedEOF}}
	if retryable(lost.Err) || !errors.Is(lost, ErrUnavailable) {
		t.Fatalf("a transport error mid-listing: retryable %v, ErrUnavailable %v; want false, true", retryable(lost.Err), errors.Is(lost, ErrUnavailable))
	}
	refused := &Error{Op: "list", Err: notRetried{&wire.Error{Code: wire.CodeInvalid, Msg: "bad"}}}
	if retryable(refused.Err) || errors.Is(refused, ErrUnavailable) {
		t.Fatal("a refusal mid-listing matches ErrUnavailable")
	}
}
