// Package faults is skuldd's Jepsen-style fault suite (TESTING.md sections
// 5 to 7): a harness that runs the real skuldd binary as five nodes in
// Linux network namespaces, drives a workload against them while a nemesis
// injects faults, and records a history; and the checkers that judge it
// (check*.go, report*.go, plot*.go).
//
// # Running
//
// scripts/faults.sh --quick --seed N (every nemesis once, at most 4
// minutes) or --time 30m (nemeses at random, sometimes two at once). It
// needs root; it builds skuldd with -tags skuldtest (the test hooks) and
// the tool (cmd/faults), and tears down everything it sets up. The same
// seed draws the same schedule and the same workload choices.
//
// --nemeses a,b,c runs only the nemeses named. The wipes (wipe,
// wipe-majority: kill -9 and the data dir deleted, replicas lost for good)
// run only so; they take the cluster beyond the design's durability
// promise, and a run with them measures the boundary: --nemeses wipe --w 1
// (an enqueue acknowledged by one replica, that replica lost) or --nemeses
// wipe-majority (a majority of a partition lost). The checkers report what
// the wipes explain as beyond the bounds (check.go, history.beyond) and
// still fail the run on the rest.
//
// # The harness, file by file
//
//   - netns.go: the network: bridge skb0 (10.77.0.254), namespaces sk1..sk5
//     with node i at 10.77.0.i:13000, relay addresses 10.77.0.(100+i) on the
//     bridge. Nothing outside 10.77.0.0/24 and our own links is touched.
//   - relay.go: a UDP relay between the nodes' QUIC endpoints (each node
//     advertises its relay address), transparent until told to drop, delay
//     and duplicate datagrams: there is no netem in this kernel.
//   - iptables.go: partitions as grudges (who drops whom), installed with
//     iptables-restore inside the namespaces and healed with iptables -F;
//     connectcheck.go: after each install and heal, TCP probes between
//     every pair of namespaces (and on the relay's paths) that must match
//     what the grudge names.
//   - process.go: one skuldd process: start, kill -9, SIGSTOP/SIGCONT,
//     SIGTERM, restart with the same flags and data dir.
//   - cluster.go, hooks.go, api.go: GET /v1/cluster (leaders, cohorts, the
//     metadata leader, node ids mapped to indexes by address), the skuldtest
//     hooks (/debug/clock, /debug/crash, /debug/replicas), and the HTTP
//     client that classifies every answer as ok, fail or info.
//   - workload.go, workers.go, sink.go: the client loops (one worker
//     process each, so one can be paused), their wire protocol to the
//     harness, and the fenced sink of their side effects.
//   - schedule.go, nemesis.go, partial.go: the nemeses, the schedule a
//     seed draws, and applying and healing each fault, with what was
//     applied to which node when a fault could not be applied whole.
//   - run.go, converge.go: a run's phases (setup, faults, heal,
//     convergence, drain, final reads) and its output directory.
//   - periodic.go: the schedules a run sets after setup (into a queue no
//     worker claims), and their final reads, schedules then tasks, into
//     periodic.json.
//   - shards.go: the worker-shard members a run keeps from after setup to
//     after the heal (one set, each member talking to one node, one that
//     churns, one that goes silent until expired), every request and
//     every stretch a member worked on an index, and the set's final
//     read, into shards.json.
//   - recorder.go, clock.go, summary.go, leaders.go: the history writer
//     and readers, the shared monotonic timeline, the harness's own
//     counts and the node-log scan (panics, and leaders.jsonl: which node
//     led each partition's epochs).
//
// What the harness did not do as recorded (a node exiting on its own, a
// nemesis skipped or applied in part, a crash that fell back to kill -9,
// a partition that does not cut what it names, a heal that failed, a
// worker lost) it records as a note (HarnessFaultNotes), and the
// checkers fail the run on it: a run is evidence only as far as it ran.
//
// # The checkers
//
// check.go digests the record; each check_*.go holds checkers of one
// concern: check_queue.go (total-queue), check_claims.go (overlap, claim
// ids, fencing, completion then claim), check_state.go (updates, deps,
// attempts, convergence, idempotent enqueue), check_keys.go (unique
// keys), check_periodic.go (each occurrence of a schedule enqueued once),
// check_shards.go (no index of a shard set worked on by two members at
// once; every index worked once the changes stop), check_refused.go (refused ops change nothing), check_harness.go (the
// harness's faults, answers a client cannot use); windows.go says which
// faults beyond the bounds excuse what. TestCheckerMutations disables
// each anomaly kind in turn and requires a table case to catch it.
//
// # Concurrency
//
// A Run is driven by one goroutine (Execute). The Recorder, Sink, API,
// Relay and NodeProc are safe for concurrent use: worker readers, final
// readers and the relay's goroutines use them at once. Each client Loop is
// used by one goroutine. Every wait is bounded (Config's timeouts, the
// named bounds in each file), and every goroutine a type starts ends in
// its Close or Stop.
//
// faults imports only wire and task of skuldd's packages (layering_test.go):
// it drives the binary from outside.
package faults
