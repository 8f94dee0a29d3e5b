// Package control is a node's leadership control plane: who leads each
// partition and where each partition lives. It owns
//
//   - the epoch handoff that makes this node a partition's leader
//     (ElectLeaders at start, lead; the voter side, ServePromise),
//   - failover: taking over the partitions of a dead leader, fencing
//     the partitions this node leads while it is cut off from most of
//     their cohort, stepping down when the registry shows a newer leader
//     (failoverLoop),
//   - placement: moving partitions to ring's cohorts over the live
//     members, on the metadata leader (placementLoop, ServeTakeover,
//     ServePull), and handing them off when the node stops (HandOffAll),
//   - zombies: releasing the copies this node holds of partitions whose
//     cohort it left (zombieLoop, ServeRelease),
//   - the clock: judging this node's clock against its peers' and
//     standing by while it drifts (clockLoop, Drifting),
//   - the shape of the metadata group's voters (voterLoop, planned by
//     raftgroup.PlanVoters).
//
// Every decision is a pure planner over a snapshot: PlanFailover,
// PlanFence, PlanPlacement, PlanHandOff, PlanZombies, PlanDrift,
// PlanElection. A planner does no I/O, reads no clock and keeps no state
// between calls (what it must remember comes in and goes out), so tests
// drive it with tables. The loops take the snapshots, ask the planners
// and act.
//
// control sees the rest of the node through Host (its replicas, the
// metadata group, gossip, the peer pool, the replication data plane's
// carry and transfer, the node's lifecycle); node implements it. control
// must not import node, reach into the store, or replicate: the carry and
// the transfer of a partition are the data plane's, which control drives
// through Host. It imports partition only for the replica's refusal to
// lead (ErrNotLeader), and keeps no metrics registry: only node/metrics
// may import prometheus.
package control
