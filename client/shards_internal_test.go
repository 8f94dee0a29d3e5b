package client

import (
	"testing"
	"time"
)

// TestRenewWait: a working member wakes at its lease's end at the latest,
// and at once when the lease already ended (a renewal that hung until
// the lease's end: it waited a quarter of its lease more before it
// stopped, past the 5 s the cluster allows for TTLs of 20 s and more).
func TestRenewWait(t *testing.T) {
	const ttl = 20 * time.Second
	for _, tc := range []struct {
		working bool
		left    time.Duration
		want    time.Duration
	}{
		{false, ttl, shardWaitRenew},
		{true, ttl, ttl / 4},
		{true, time.Second, time.Second},
		{true, 0, 0},
		{true, -time.Second, 0},
	} {
		if got := renewWait(tc.working, ttl, tc.left); got != tc.want {
			t.Errorf("renewWait(working %v, left %v) = %v; want %v", tc.working, tc.left, got, tc.want)
		}
	}
}
