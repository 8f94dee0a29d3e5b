package faults

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// The test hooks of a skuldd built with -tags skuldtest (each needs the
// client token like the API):
//
//	POST /debug/clock {"offset_ms": N}      set the node's clock offset, live
//	GET  /debug/clock                       {"offset_ms": N}
//	POST /debug/crash {"lose_unsynced": true}  drop unsynced writes and exit 137
//	GET  /debug/replicas                    the node's replicas and their anti-entropy roots

// hookTimeout bounds one hook call: they answer from memory.
const hookTimeout = 2 * time.Second

type clockBody struct {
	OffsetMs int64 `json:"offset_ms"`
}

type crashBody struct {
	LoseUnsynced bool `json:"lose_unsynced"`
}

// ReplicaState is one partition replica in GET /debug/replicas.
type ReplicaState struct {
	Partition    int    `json:"partition"`
	Held         bool   `json:"held"`
	LeadingEpoch uint64 `json:"leading_epoch"`
	Promised     uint64 `json:"promised"`
	Root         string `json:"root"`
}

// Replicas is a node's GET /debug/replicas.
type Replicas struct {
	Node       uint64         `json:"node"`
	Partitions []ReplicaState `json:"partitions"`
}

// HasHooks reports whether node i serves the test hooks (the binary was
// built with -tags skuldtest), and why not.
func HasHooks(ctx context.Context, api *API, i int) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, hookTimeout)
	defer cancel()
	var cb clockBody
	r := api.Do(ctx, i, http.MethodGet, "/debug/clock", nil, &cb)
	if r.Read() {
		return true, ""
	}
	return false, fmt.Sprintf("GET /debug/clock on node %d: %d %s %s", i, r.Status, r.Code, r.Err)
}

// SetClock sets node i's clock offset.
func SetClock(ctx context.Context, api *API, i int, offsetMs int64) error {
	ctx, cancel := context.WithTimeout(ctx, hookTimeout)
	defer cancel()
	r := api.Do(ctx, i, http.MethodPost, "/debug/clock", &clockBody{OffsetMs: offsetMs}, nil)
	if r.Type != OK {
		return fmt.Errorf("node %d: set clock offset %d ms: %s %s", i, offsetMs, r.Code, r.Err)
	}
	return nil
}

// Crash asks node i to drop its unsynced writes and exit. The node may
// die before it answers, so the answer is not an error: the caller waits
// for the exit.
func Crash(ctx context.Context, api *API, i int) Result {
	ctx, cancel := context.WithTimeout(ctx, hookTimeout)
	defer cancel()
	return api.Do(ctx, i, http.MethodPost, "/debug/crash", &crashBody{LoseUnsynced: true}, nil)
}

// FetchReplicas reads node i's replicas.
func FetchReplicas(ctx context.Context, api *API, i int) (*Replicas, error) {
	ctx, cancel := context.WithTimeout(ctx, hookTimeout)
	defer cancel()
	var rs Replicas
	r := api.Do(ctx, i, http.MethodGet, "/debug/replicas", nil, &rs)
	if !r.Read() {
		return nil, fmt.Errorf("node %d: replicas: %s %s", i, r.Code, r.Err)
	}
	return &rs, nil
}
