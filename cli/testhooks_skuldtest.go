//go:build skuldtest

package cli

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/skuldd/skuldd/clock"
	"github.com/skuldd/skuldd/node"
	"github.com/skuldd/skuldd/store"
)

// The fault suite's hooks (scripts/faults.sh builds skuldd with
// -tags skuldtest). They are HTTP endpoints under /debug/, behind the
// client token like the API:
//
//   - GET /debug/clock, POST /debug/clock {"offset_ms": N}: read and move
//     the node's clock offset from real time while it runs;
//   - POST /debug/crash {"lose_unsynced": true}: put every file of the
//     store back as its last sync left it and exit at once with status
//     137, a power cut rather than a kill -9 (whose page cache keeps what
//     was not synced);
//   - GET /debug/replicas: this node's replica of each partition and its
//     anti-entropy root, for the convergence check.
//
// A production build has none of this: testHooks stays nil.

// crashExitCode is what a crash through the hook exits with: the status
// a shell reports for kill -9.
const crashExitCode = 137

func init() { testHooks = installTestHooks }

func installTestHooks(cfg *node.Config, logger *slog.Logger) func(*node.Node) {
	var offset time.Duration
	if o, ok := cfg.Clock.(clock.Offset); ok {
		offset = o.By
	}
	shift := clock.NewShift(clock.Real{}, offset)
	cfg.Clock = shift
	fs := store.NewCrashFS(nil)
	cfg.StoreFS = fs
	var n atomic.Pointer[node.Node]

	mux := http.NewServeMux()
	type clockBody struct {
		OffsetMs int64 `json:"offset_ms"`
	}
	mux.HandleFunc("GET /debug/clock", func(w http.ResponseWriter, _ *http.Request) {
		writeHookJSON(w, clockBody{OffsetMs: shift.By().Milliseconds()})
	})
	mux.HandleFunc("POST /debug/clock", func(w http.ResponseWriter, r *http.Request) {
		var b clockBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, "want {\"offset_ms\": N}: "+err.Error(), http.StatusBadRequest)
			return
		}
		shift.Set(time.Duration(b.OffsetMs) * time.Millisecond)
		logger.Warn("test hook: clock offset changed", "offset", shift.By())
		writeHookJSON(w, b)
	})
	mux.HandleFunc("POST /debug/crash", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			LoseUnsynced bool `json:"lose_unsynced"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || !b.LoseUnsynced {
			http.Error(w, "want {\"lose_unsynced\": true}", http.StatusBadRequest)
			return
		}
		logger.Warn("test hook: crashing, losing every write not synced")
		if err := fs.Crash(); err != nil {
			logger.Error("test hook: crash could not restore the store's files", "err", err)
		}
		os.Exit(crashExitCode)
	})
	mux.HandleFunc("GET /debug/replicas", func(w http.ResponseWriter, _ *http.Request) {
		nd := n.Load()
		if nd == nil {
			http.Error(w, "node not started", http.StatusServiceUnavailable)
			return
		}
		reps, err := nd.Replicas()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeHookJSON(w, struct {
			Node       uint64              `json:"node"`
			Partitions []node.ReplicaState `json:"partitions"`
		}{nd.ID(), reps})
	})
	cfg.Debug = mux
	logger.Warn("test build: fault hooks served under /debug/ (clock, crash, replicas)")
	return func(nd *node.Node) { n.Store(nd) }
}

func writeHookJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
