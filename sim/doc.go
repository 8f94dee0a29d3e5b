// Package sim is skuldd's seeded simulation (issue 21, item 4): N real
// nodes in one process, on the in-memory peer network (peer.MemNet, with
// node.Config.NoListen: no sockets at all), each on an in-memory Pebble
// disk that a crash images as a power cut would leave it (store.MemFS),
// run inside a testing/synctest bubble, so time is virtual: timers, TTLs,
// raft ticks and gossip run at the speed the CPU allows, and a run of a
// minute of cluster time takes a second or so of the machine's.
//
// One seed draws the fault schedule and every client's workload choices.
// The schedule has two tracks that overlap: links (a node partitioned
// from the rest, one-way cuts, one-way drops of replication, delays,
// reordering, duplicated requests, lost replies of forwarded requests)
// and nodes (kills, crashes that lose unsynced writes, a majority of the
// nodes crashed at once, a node frozen as by SIGSTOP with its clients'
// requests held until it thaws, clock shifts of one or more nodes up to
// the skew bound apart, never beyond: Config.SkewBound). The clients
// enqueue with w=1 or a majority, some tasks depending on tasks
// acknowledged earlier, and offer each task's side effect to a fenced
// sink (faults.Sink) before they complete it. At the end the simulation
// heals, waits for the replicas to converge, drains the queue, reads
// every task from every node and judges the history with the fault
// suite's own checkers (faults.Analyze): no acknowledged write lost
// (whatever w acknowledged it: a crash here loses only unsynced writes),
// no overlapping live claims, claim ids growing, no claim after an
// acknowledged completion or before a dependency's, no complete accepted
// after the sink fenced its claim, replicas converged, and the rest of
// that suite. Nothing the simulation does is beyond the design's bounds,
// so any anomaly fails the seed.
//
// Determinism: a seed fixes the schedule and each client's choices, not
// the interleaving. Go's scheduler is not deterministic, inside a bubble
// too, so the same seed replays the same faults at the same virtual times
// and the same client decisions given the same answers, but not the same
// answers every time: a failing seed usually, not always, fails again.
// The test prints the replay command of every failing seed:
//
//	go test ./sim -run TestSim -seed N -seeds 1
//
// and -seeds K runs K seeds from -seed. Their defaults are 1 and 200, or
// $SKULDD_SIM_SEED and $SKULDD_SIM_SEEDS when set: CI sets the first
// from the commit and prints the range (.ci/run), so each commit tries
// other seeds and its log says which; a plain go test ./... runs seeds
// 1-200. A long search runs -seeds 100000.
//
// Searches of an hour each (issue 29; go test -c, then the binary with
// -test.run TestSim -seed S -seeds K under timeout 3600): seeds
// 100000-107999 passed; seeds 300000-303217 found seed 300649, which
// lost acknowledged updates in about one run in 80 (a partial record
// taken into an unclaimed task's zero state; fixed in partition.Merge,
// TestMergePartialRecordIntoUnclaimed); after the fix seeds
// 400000-408162 passed, and seed 300649 passed 300 replays.
//
// Concurrency: a Run belongs to one goroutine (the test's, inside its
// bubble); the clients, the nemesis and the nodes' own goroutines run in
// the same bubble and stop before Run returns, so the bubble ends with no
// goroutine left.
package sim
