package wire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestFannedParts: a forwarded request's partitions travel in its CBOR
// form (the peer protocol), flattened into the request, and never in its
// JSON form (the HTTP API): a client cannot name them.
func TestFannedParts(t *testing.T) {
	req := &GroupCancelRequest{Group: "g", Reason: "r"}
	req.SetParts([]uint16{3, 7})
	b, err := Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got GroupCancelRequest
	if err := Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Group != "g" || got.Reason != "r" || !slices.Equal(got.Parts, []uint16{3, 7}) {
		t.Errorf("CBOR round trip = %+v", got)
	}
	// Flattened: the body is a map of three keys, not a nested one.
	var m map[int]any
	if err := Unmarshal(b, &m); err != nil || len(m) != 3 || m[64] == nil {
		t.Errorf("CBOR body %v, %v; want keys 1, 2 and 64", m, err)
	}
	j, err := json.Marshal(req)
	if err != nil || strings.Contains(string(j), "parts") || strings.Contains(string(j), "64") {
		t.Errorf("JSON form %s, %v; want no parts", j, err)
	}
	for _, r := range []any{&CountRequest{}, &QueuesRequest{}, &ListRequest{}, &DeadRequest{}, &GroupRequest{}} {
		if _, ok := r.(interface{ SetParts([]uint16) }); !ok {
			t.Errorf("%T is not fanned", r)
		}
	}
}
