package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skuldd/skuldd/task"
)

// The ops of the client API. Values are part of the protocol: never
// renumber, only append.
const (
	OpPing     Op = 1
	OpEnqueue  Op = 10
	OpClaim    Op = 11
	OpRenew    Op = 12
	OpUpdate   Op = 13
	OpComplete Op = 14
	OpFail     Op = 15
	OpSnooze   Op = 16
	OpRequeue  Op = 17
	OpGet      Op = 18
	OpList     Op = 19
	OpCount    Op = 20
	OpQueues   Op = 21
	OpCluster  Op = 22
	OpLeave    Op = 23
	OpGC       Op = 24
	// OpQueueGet and OpQueueSet read and change a queue's settings.
	OpQueueGet Op = 25
	OpQueueSet Op = 26
	// OpCancel, OpDelete: task control on one task. OpRequeueDead and
	// OpPurgeDead act on every dead task of a queue.
	OpCancel      Op = 27
	OpDelete      Op = 28
	OpRequeueDead Op = 29
	OpPurgeDead   Op = 30
	// OpGroup reads a task group's counts; OpGroupCancel cancels its
	// tasks.
	OpGroup       Op = 31
	OpGroupCancel Op = 32
	// OpHints lists the hinted enqueues the node that answers holds.
	OpHints Op = 33
	// OpScheduleSet, OpScheduleList and OpScheduleDelete manage the
	// periodic tasks.
	OpScheduleSet    Op = 34
	OpScheduleList   Op = 35
	OpScheduleDelete Op = 36
	// OpShardJoin, OpShardRenew, OpShardLeave and OpShardMembers are the
	// worker shards: a member joins a set, renews its lease (saying what
	// it stopped), leaves; anyone reads a set.
	OpShardJoin    Op = 37
	OpShardRenew   Op = 38
	OpShardLeave   Op = 39
	OpShardMembers Op = 40
	// The client credentials (AuthService; admin only).
	OpAuthCreate Op = 41
	OpAuthList   Op = 42
	OpAuthRevoke Op = 43
	// A cluster's life (AdminService; admin only): the upgrade status and
	// finalize, forgetting a dead node.
	OpUpgrade      Op = 44
	OpRemoveNode   Op = 45
	OpDecommission Op = 46
)

// The ops of the peer protocol (peer ALPN connections only). Same rule:
// never renumber.
const (
	// OpRaft carries raft messages to the metadata group (RaftBatch).
	OpRaft Op = 100
	// OpGossip carries one memberlist packet (GossipPacket).
	OpGossip Op = 101
	// OpJoin asks a member to add the caller to the cluster (JoinRequest).
	OpJoin Op = 102
)

// Raw stream kinds (Conn.OpenRaw) of the peer protocol.
const (
	// RawGossip is a memberlist stream (push/pull state, fallback probes).
	RawGossip byte = 1
)

var opNames = map[Op]string{
	OpPing: "ping", OpEnqueue: "enqueue", OpClaim: "claim", OpRenew: "renew",
	OpUpdate: "update", OpComplete: "complete", OpFail: "fail", OpSnooze: "snooze",
	OpRequeue: "requeue", OpGet: "get", OpList: "list", OpCount: "count", OpQueues: "queues",
	OpCluster: "cluster", OpLeave: "leave", OpGC: "gc", OpQueueGet: "queue-get", OpQueueSet: "queue-set",
	OpCancel: "cancel", OpDelete: "delete", OpRequeueDead: "requeue-dead", OpPurgeDead: "purge-dead",
	OpGroup: "group", OpGroupCancel: "group-cancel", OpHints: "hints",
	OpScheduleSet: "schedule-set", OpScheduleList: "schedule-list", OpScheduleDelete: "schedule-delete",
	OpShardJoin: "shard-join", OpShardRenew: "shard-renew", OpShardLeave: "shard-leave", OpShardMembers: "shard-members", OpAuthCreate: "auth-create", OpAuthList: "auth-list", OpAuthRevoke: "auth-revoke", OpUpgrade: "upgrade", OpRemoveNode: "remove-node", OpDecommission: "decommission", OpRaft: "raft", OpGossip: "gossip", OpJoin: "join",
}

// String returns the op's name.
func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return "op_" + strconv.FormatUint(uint64(o), 10)
}

// The messages below are shared by the QUIC protocol (CBOR, integer keys)
// and the HTTP API (JSON, the json names). Durations travel as
// milliseconds; times as Unix milliseconds.

// EnqueueTask is one task to enqueue.
type EnqueueTask struct {
	// ID is optional: a client that supplies it can retry the enqueue after
	// a timeout without ever creating a duplicate.
	ID          *task.ID  `cbor:"1,keyasint,omitempty" json:"id,omitempty"`
	Queue       string    `cbor:"2,keyasint" json:"queue"`
	Priority    int32     `cbor:"3,keyasint,omitempty" json:"priority,omitempty"`
	Data        []byte    `cbor:"4,keyasint,omitempty" json:"data,omitempty"`
	Deps        []task.ID `cbor:"5,keyasint,omitempty" json:"deps,omitempty"`
	DelayMs     int64     `cbor:"6,keyasint,omitempty" json:"delay_ms,omitempty"`
	Group       string    `cbor:"7,keyasint,omitempty" json:"group,omitempty"`
	Description string    `cbor:"8,keyasint,omitempty" json:"description,omitempty"`
	// MaxAttempts 0 means the node's default.
	MaxAttempts uint32 `cbor:"9,keyasint,omitempty" json:"max_attempts,omitempty"`
	// FreshID is set between nodes only: the forwarding node assigned ID
	// for this very attempt, so no task can hold it yet and the leader
	// skips the idempotency check. A node honours it only on a request a
	// peer forwarded; it never comes from a client (not in JSON, and the
	// coordinator clears it).
	FreshID bool `cbor:"10,keyasint,omitempty" json:"-"`
	// TimeLimitMs bounds how long one claim of the task may run, from its
	// start (0: the queue's default, else none): the leader grants and
	// renews no lease past it.
	TimeLimitMs int64 `cbor:"11,keyasint,omitempty" json:"time_limit_ms,omitempty"`
	// Kind routes the task to a handler; Subtopic classifies it within
	// its queue (both optional labels).
	Kind     string `cbor:"12,keyasint,omitempty" json:"kind,omitempty"`
	Subtopic string `cbor:"13,keyasint,omitempty" json:"subtopic,omitempty"`
	// Key makes the task unique in its queue (task.Spec.Key): while a
	// task of the queue with the key is kept (for at most UniqueForMs
	// after its enqueue, if set), the enqueue yields that task
	// (EnqueueResult.Duplicate). An ID given with a key must be of the
	// key's partition (task.KeyPartition).
	Key         string `cbor:"14,keyasint,omitempty" json:"key,omitempty"`
	UniqueForMs int64  `cbor:"15,keyasint,omitempty" json:"unique_for_ms,omitempty"`
	// Hinted is set between nodes only, as FreshID: a hinted enqueue of a
	// keyed task that its coordinator hands over to the key's leader. The
	// leader writes it even if another task holds the key, then retired
	// at once (cancelled with RetiredKeyReason): it was acknowledged
	// ("hinted") while its cohort was out of reach, so it must exist, and
	// the task that already held the key keeps it.
	Hinted bool `cbor:"16,keyasint,omitempty" json:"-"`
	// Drawn is the node's own mark, never encoded: the node that took
	// the request drew ID for it, on this attempt or an earlier one
	// (FreshID holds on the first only). No client holds such an id, so
	// the node may keep the task as hints on other nodes when its cohort
	// fails the write (node/coord's spread).
	Drawn bool `cbor:"-" json:"-"`
}

// EnqueueRequest enqueues a batch of tasks. W is the number of durable
// replica acks to wait for (0: a majority of the cohort).
type EnqueueRequest struct {
	Tasks []EnqueueTask `cbor:"1,keyasint" json:"tasks"`
	W     int           `cbor:"2,keyasint,omitempty" json:"w,omitempty"`
	// Hint: a task whose cohort the node cannot write (W replicas do not
	// answer within its hint wait) is kept on the node, synced, and
	// handed to its cohort once it can be: the answer says "hinted"
	// (EnqueueResult.Hinted). A task with deps is never hinted; a keyed
	// one is retired at its handover if its key was taken meanwhile.
	Hint bool `cbor:"3,keyasint,omitempty" json:"hint,omitempty"`
	// Taken is the node's own mark, never encoded: when the node that
	// took the request first did (its first attempt). Its waits for the
	// cohort (the hint wait) count from then, over every attempt.
	Taken time.Time `cbor:"-" json:"-"`
}

// EnqueueResult is the outcome for one task, in request order.
type EnqueueResult struct {
	ID   task.ID `cbor:"1,keyasint" json:"id"`
	Acks int     `cbor:"2,keyasint" json:"acks"`
	// Duplicate: the task's key was taken, and ID is the task that holds
	// it (no task was created; Acks replicas hold that one).
	Duplicate bool `cbor:"3,keyasint,omitempty" json:"duplicate,omitempty"`
	// Hinted: the task's cohort could not be written; the node that
	// answered holds the task durably (a hint) and hands it to the
	// cohort once it can. Acks is 0: some replicas may hold it already.
	Hinted bool `cbor:"4,keyasint,omitempty" json:"hinted,omitempty"`
}

// EnqueueResponse answers EnqueueRequest.
type EnqueueResponse struct {
	Results []EnqueueResult `cbor:"1,keyasint" json:"results"`
}

// ClaimRequest asks for up to Count ready tasks of Queue, each leased for
// TTLMs. With WaitMs > 0 it long-polls: it waits up to WaitMs for work to
// appear instead of answering empty at once.
type ClaimRequest struct {
	Queue  string `cbor:"1,keyasint" json:"queue"`
	TTLMs  int64  `cbor:"2,keyasint,omitempty" json:"ttl_ms,omitempty"`
	Count  int    `cbor:"3,keyasint,omitempty" json:"count,omitempty"`
	WaitMs int64  `cbor:"4,keyasint,omitempty" json:"wait_ms,omitempty"`
}

// ClaimResponse holds the claimed tasks, each with its Claim set; empty
// when nothing was ready (that is not an error).
type ClaimResponse struct {
	Tasks []TaskView `cbor:"1,keyasint" json:"tasks"`
	// Waited is how long the claim long-polled for work, of its time at
	// the node that coordinated it: for the node's own metrics, which
	// keep the wait apart from the claim's latency. Never encoded.
	Waited time.Duration `cbor:"-" json:"-"`
}

// RenewRequest extends claim Claim of task ID to now+TTLMs.
type RenewRequest struct {
	ID    task.ID `cbor:"1,keyasint" json:"id"`
	Claim uint32  `cbor:"2,keyasint" json:"claim"`
	TTLMs int64   `cbor:"3,keyasint,omitempty" json:"ttl_ms,omitempty"`
}

// RenewResponse gives the claim's new end.
type RenewResponse struct {
	End  int64 `cbor:"1,keyasint" json:"end"`
	Acks int   `cbor:"2,keyasint" json:"acks"`
}

// UpdateRequest appends progress entry Seq to claim Claim's history.
type UpdateRequest struct {
	ID    task.ID `cbor:"1,keyasint" json:"id"`
	Claim uint32  `cbor:"2,keyasint" json:"claim"`
	Seq   uint64  `cbor:"3,keyasint" json:"seq"`
	Data  []byte  `cbor:"4,keyasint,omitempty" json:"data,omitempty"`
}

// CompleteRequest completes task ID under claim Claim. Seq, if set, must be
// the next seq of the claim's history; unset means "after the last update".
//
// With Next set, the node also claims the next tasks, as a ClaimRequest
// without long-poll would, and answers them with the completion: a worker
// loop then costs one round trip and one fsync wait per task instead of
// two. The completion is durable before any next task is returned; if the
// claim finds nothing, Next in the response is empty.
type CompleteRequest struct {
	ID    task.ID       `cbor:"1,keyasint" json:"id"`
	Claim uint32        `cbor:"2,keyasint" json:"claim"`
	Seq   *uint64       `cbor:"3,keyasint,omitempty" json:"seq,omitempty"`
	Next  *ClaimRequest `cbor:"4,keyasint,omitempty" json:"next,omitempty"`
}

// CompleteResponse answers CompleteRequest: the completion's durable acks
// and the next tasks claimed, each with its Claim set.
type CompleteResponse struct {
	Acks int        `cbor:"1,keyasint" json:"acks"`
	Next []TaskView `cbor:"2,keyasint,omitempty" json:"next,omitempty"`
}

// FailRequest ends claim Claim as a failed attempt. The task is retried
// after RetryAfterMs (unset: the node's exponential backoff), or goes dead
// once it has failed max_attempts times.
type FailRequest struct {
	ID           task.ID `cbor:"1,keyasint" json:"id"`
	Claim        uint32  `cbor:"2,keyasint" json:"claim"`
	Reason       string  `cbor:"3,keyasint,omitempty" json:"reason,omitempty"`
	RetryAfterMs *int64  `cbor:"4,keyasint,omitempty" json:"retry_after_ms,omitempty"`
	// NoRetry makes the task dead at once, whatever its attempts left
	// (a handler's SkipRetry); it excludes RetryAfterMs.
	NoRetry bool `cbor:"5,keyasint,omitempty" json:"no_retry,omitempty"`
}

// SnoozeRequest ends claim Claim without counting an attempt; the task is
// ready again after DelayMs.
type SnoozeRequest struct {
	ID      task.ID `cbor:"1,keyasint" json:"id"`
	Claim   uint32  `cbor:"2,keyasint" json:"claim"`
	DelayMs int64   `cbor:"3,keyasint,omitempty" json:"delay_ms,omitempty"`
}

// RequeueRequest makes a dead task ready again.
type RequeueRequest struct {
	ID task.ID `cbor:"1,keyasint" json:"id"`
}

// CancelRequest ends a task that is not completed as cancelled: terminal,
// never claimed again; its live claim is superseded, and the task's
// dependents stay blocked. A repeat is acknowledged.
type CancelRequest struct {
	ID     task.ID `cbor:"1,keyasint" json:"id"`
	Reason string  `cbor:"2,keyasint,omitempty" json:"reason,omitempty"`
	// Claim, when set, fences the cancel like a fail: it is refused
	// unless Claim is the task's latest claim, not ended (a handler
	// cancelling its own task; an operator's cancel names none).
	Claim *uint32 `cbor:"3,keyasint,omitempty" json:"claim,omitempty"`
}

// DeleteRequest deletes a task, claimed or not (its claim is superseded,
// as by a cancel): it reads as not found afterwards. A task with
// dependents can be deleted only once completed.
type DeleteRequest struct {
	ID task.ID `cbor:"1,keyasint" json:"id"`
}

// Fanned is embedded in the requests a node fans out to the partition
// leaders (a count, a listing, a bulk op): Parts, set only on the copy a
// coordinator forwards, names the partitions the coordinator's registry
// says the receiving leader leads. A leader whose registry disagrees
// answers unavailable rather than serve other partitions than those the
// coordinator counts on it for (one would be missed, or served twice).
// Peers only: not part of the JSON form, ignored on a client's request.
type Fanned struct {
	Parts []uint16 `cbor:"64,keyasint,omitempty" json:"-"`
}

// SetParts sets the partitions a forwarded copy is for.
func (f *Fanned) SetParts(parts []uint16) { f.Parts = parts }

// DeadRequest names the queue whose dead tasks a bulk requeue or purge
// acts on.
type DeadRequest struct {
	Queue string `cbor:"1,keyasint" json:"queue"`
	Fanned
}

// BulkResponse answers a bulk op (a requeue or purge of a queue's dead
// tasks, a group cancel): how many tasks it acted on, and how many it
// left (a purge keeps a dead task that others depend on; a task may stop
// being dead, or end, meanwhile), with the first refusals.
type BulkResponse struct {
	Done    int      `cbor:"1,keyasint" json:"done"`
	Skipped int      `cbor:"2,keyasint,omitempty" json:"skipped,omitempty"`
	Errors  []string `cbor:"3,keyasint,omitempty" json:"errors,omitempty"`
}

// Ack answers writes with the number of durable replica acks.
type Ack struct {
	Acks int `cbor:"1,keyasint" json:"acks"`
}

// GetRequest reads a task. With MinSeq set, the read fails with
// CodeStale unless the task's visible history (the updates of all its
// claims) has at least MinSeq entries.
type GetRequest struct {
	ID     task.ID `cbor:"1,keyasint" json:"id"`
	MinSeq *uint64 `cbor:"2,keyasint,omitempty" json:"min_seq,omitempty"`
	// R is the number of replicas read and merged (0: a majority of the
	// partition's cohort); stale replicas among them are repaired.
	R int `cbor:"3,keyasint,omitempty" json:"r,omitempty"`
}

// ListRequest lists tasks, filtered; the response is streamed in pages.
// Limit 0 means no limit.
type ListRequest struct {
	Queue string `cbor:"1,keyasint,omitempty" json:"queue,omitempty"`
	State string `cbor:"2,keyasint,omitempty" json:"state,omitempty"`
	Group string `cbor:"3,keyasint,omitempty" json:"group,omitempty"`
	Limit int    `cbor:"4,keyasint,omitempty" json:"limit,omitempty"`
	// Kind and Subtopic filter by those labels.
	Kind     string `cbor:"5,keyasint,omitempty" json:"kind,omitempty"`
	Subtopic string `cbor:"6,keyasint,omitempty" json:"subtopic,omitempty"`
	// After is the cursor: only the tasks that come after it in the
	// listing's order are listed. A listing is in id order (enqueue
	// order) across the cluster, so the last id of one page is the
	// cursor of the next.
	After *task.ID `cbor:"7,keyasint,omitempty" json:"after,omitempty"`
	// Desc lists in descending id order: the newest first.
	Desc bool `cbor:"8,keyasint,omitempty" json:"desc,omitempty"`
	Fanned
}

// ListPage is one page of a streamed list.
type ListPage struct {
	Tasks []TaskView `cbor:"1,keyasint" json:"tasks"`
}

// CountRequest counts the tasks of Queue (all queues if empty), in every
// state; with Subtopic, only those of that subtopic.
type CountRequest struct {
	Queue    string `cbor:"1,keyasint,omitempty" json:"queue,omitempty"`
	Subtopic string `cbor:"2,keyasint,omitempty" json:"subtopic,omitempty"`
	Fanned
}

// CountResponse answers CountRequest.
type CountResponse struct {
	Count int64 `cbor:"1,keyasint" json:"count"`
}

// QueuesRequest asks for per-queue statistics; with Subtopics, per
// subtopic of each queue too.
type QueuesRequest struct {
	Subtopics bool `cbor:"1,keyasint,omitempty" json:"subtopics,omitempty"`
	Fanned
}

// QueueStats counts one queue's tasks by state.
type QueueStats struct {
	Queue   string `cbor:"1,keyasint" json:"queue"`
	Ready   int64  `cbor:"2,keyasint" json:"ready"`
	Claimed int64  `cbor:"3,keyasint" json:"claimed"`
	// Delayed counts delayed, snoozed and retrying tasks alike.
	Delayed   int64 `cbor:"4,keyasint" json:"delayed"`
	Blocked   int64 `cbor:"5,keyasint" json:"blocked"`
	Completed int64 `cbor:"6,keyasint" json:"completed"`
	Dead      int64 `cbor:"7,keyasint" json:"dead"`
	Cancelled int64 `cbor:"8,keyasint,omitempty" json:"cancelled"`
	// Subtopic is set on the rows of QueuesResponse.Subtopics.
	Subtopic string `cbor:"9,keyasint,omitempty" json:"subtopic,omitempty"`
	// OldestReadyAt is when the queue's oldest ready task was enqueued
	// (Unix ms; 0: none ready): how far behind its workers are. Not set
	// on subtopic rows.
	OldestReadyAt int64 `cbor:"10,keyasint,omitempty" json:"oldest_ready_at,omitempty"`
}

// QueuesResponse answers QueuesRequest, sorted by queue name (and
// subtopic).
type QueuesResponse struct {
	Queues    []QueueStats `cbor:"1,keyasint" json:"queues"`
	Subtopics []QueueStats `cbor:"2,keyasint,omitempty" json:"subtopics,omitempty"`
}

// GroupRequest reads a task group: its counts by state and up to Dead of
// its dead tasks (0: DefaultGroupDead; at most MaxGroupDead).
type GroupRequest struct {
	Group string `cbor:"1,keyasint" json:"group"`
	Dead  int    `cbor:"2,keyasint,omitempty" json:"dead,omitempty"`
	Fanned
}

// How many dead tasks a GroupResponse lists.
const (
	DefaultGroupDead = 10
	MaxGroupDead     = 1000
)

// GroupResponse answers GroupRequest. The counts are of the tasks the
// cluster holds: a task garbage collection took is in none. Progress is
// Completed out of Total.
type GroupResponse struct {
	Group     string `cbor:"1,keyasint" json:"group"`
	Total     int64  `cbor:"2,keyasint" json:"total"`
	Ready     int64  `cbor:"3,keyasint" json:"ready"`
	Claimed   int64  `cbor:"4,keyasint" json:"claimed"`
	Delayed   int64  `cbor:"5,keyasint" json:"delayed"`
	Blocked   int64  `cbor:"6,keyasint" json:"blocked"`
	Completed int64  `cbor:"7,keyasint" json:"completed"`
	Dead      int64  `cbor:"8,keyasint" json:"dead"`
	Cancelled int64  `cbor:"9,keyasint" json:"cancelled"`
	// Failures are dead tasks of the group, lowest id first, with the
	// reason of their last failure.
	Failures []GroupFailure `cbor:"10,keyasint,omitempty" json:"failures,omitempty"`
}

// GroupFailure is one dead task of a group.
type GroupFailure struct {
	ID       task.ID `cbor:"1,keyasint" json:"id"`
	Queue    string  `cbor:"2,keyasint" json:"queue"`
	Attempts uint32  `cbor:"3,keyasint" json:"attempts"`
	// At and Reason are the last failure's (Reason "time limit" when the
	// leader ended the claim at its time limit).
	At     int64  `cbor:"4,keyasint,omitempty" json:"at,omitempty"`
	Reason string `cbor:"5,keyasint,omitempty" json:"reason,omitempty"`
}

// GroupCancelRequest cancels every task of a group that is not ended,
// with Reason on each.
type GroupCancelRequest struct {
	Group  string `cbor:"1,keyasint" json:"group"`
	Reason string `cbor:"2,keyasint,omitempty" json:"reason,omitempty"`
	Fanned
}

// HintsRequest asks a node for the hinted enqueues it holds (its own:
// each node holds those it acknowledged), the first Limit of them in id
// order (0: hintsDefaultLimit).
type HintsRequest struct {
	Limit int `cbor:"1,keyasint,omitempty" json:"limit,omitempty"`
}

// HintsResponse is a node's hinted enqueues: how many it holds, how many
// it handed over since it started, when the oldest was hinted (Unix ms;
// 0: none), and the first ones.
type HintsResponse struct {
	Node     uint64     `cbor:"1,keyasint" json:"node,string"`
	Pending  int64      `cbor:"2,keyasint" json:"pending"`
	Handed   int64      `cbor:"3,keyasint" json:"handed"`
	OldestAt int64      `cbor:"4,keyasint,omitempty" json:"oldest_at,omitempty"`
	Hints    []HintView `cbor:"5,keyasint" json:"hints"`
}

// HintView is one hinted enqueue: its task, queue and partition, when it
// was hinted and the w its enqueue asked.
type HintView struct {
	ID        task.ID `cbor:"1,keyasint" json:"id"`
	Queue     string  `cbor:"2,keyasint" json:"queue"`
	Partition uint16  `cbor:"3,keyasint" json:"partition"`
	At        int64   `cbor:"4,keyasint" json:"at"`
	W         int     `cbor:"5,keyasint,omitempty" json:"w,omitempty"`
}

// TaskView is a task as clients see it.
type TaskView struct {
	ID       task.ID   `cbor:"1,keyasint" json:"id"`
	Queue    string    `cbor:"2,keyasint" json:"queue"`
	Priority int32     `cbor:"3,keyasint" json:"priority"`
	Data     []byte    `cbor:"4,keyasint" json:"data"`
	Deps     []task.ID `cbor:"5,keyasint" json:"deps"`
	State    string    `cbor:"6,keyasint" json:"state"`
	// Claim is set in claim responses: the claim id just granted.
	Claim       *uint32       `cbor:"7,keyasint,omitempty" json:"claim,omitempty"`
	Claims      []ClaimView   `cbor:"8,keyasint" json:"claims"`
	Updates     []UpdateView  `cbor:"9,keyasint" json:"updates"`
	Group       string        `cbor:"10,keyasint,omitempty" json:"group,omitempty"`
	Description string        `cbor:"11,keyasint,omitempty" json:"description,omitempty"`
	MaxAttempts uint32        `cbor:"12,keyasint" json:"max_attempts"`
	Attempts    uint32        `cbor:"13,keyasint" json:"attempts"`
	NotBefore   int64         `cbor:"14,keyasint,omitempty" json:"not_before,omitempty"`
	EnqueuedAt  int64         `cbor:"15,keyasint" json:"enqueued_at"`
	Failures    []FailureView `cbor:"16,keyasint,omitempty" json:"failures,omitempty"`
	// Cancelled is set for a cancelled task.
	Cancelled *CancelView `cbor:"17,keyasint,omitempty" json:"cancelled,omitempty"`
	// TimeLimitMs is how long one claim may run (0: no limit).
	TimeLimitMs int64  `cbor:"18,keyasint,omitempty" json:"time_limit_ms,omitempty"`
	Kind        string `cbor:"19,keyasint,omitempty" json:"kind,omitempty"`
	Subtopic    string `cbor:"20,keyasint,omitempty" json:"subtopic,omitempty"`
	Key         string `cbor:"21,keyasint,omitempty" json:"key,omitempty"`
	UniqueForMs int64  `cbor:"22,keyasint,omitempty" json:"unique_for_ms,omitempty"`
}

// RetiredKeyReason begins the cancel reason of a task its leader retired
// because another task holds its unique key (two leaders each took the
// key, or a hint was handed over after the key was taken); the id of that
// task follows.
const RetiredKeyReason = task.RetiredKeyReason

// CancelView is a task's cancel: when, and the reason given.
type CancelView struct {
	At     int64  `cbor:"1,keyasint" json:"at"`
	Reason string `cbor:"2,keyasint,omitempty" json:"reason,omitempty"`
}

// ClaimView is one claim of a task. Completed is the completion time if
// this claim completed the task, else null.
type ClaimView struct {
	Claim     uint32 `cbor:"1,keyasint" json:"claim"`
	Start     int64  `cbor:"2,keyasint" json:"start"`
	End       int64  `cbor:"3,keyasint" json:"end"`
	Completed *int64 `cbor:"4,keyasint,omitempty" json:"completed"`
	Epoch     uint64 `cbor:"5,keyasint,omitempty" json:"epoch,omitempty"`
}

// UpdateView is one visible progress entry.
type UpdateView struct {
	Claim uint32 `cbor:"1,keyasint" json:"claim"`
	Seq   uint64 `cbor:"2,keyasint" json:"seq"`
	Data  []byte `cbor:"3,keyasint" json:"data"`
}

// FailureView is a claim ended by fail or snooze.
type FailureView struct {
	Claim  uint32 `cbor:"1,keyasint" json:"claim"`
	At     int64  `cbor:"2,keyasint" json:"at"`
	Reason string `cbor:"3,keyasint,omitempty" json:"reason,omitempty"`
	Snooze bool   `cbor:"4,keyasint,omitempty" json:"snooze,omitempty"`
	Until  int64  `cbor:"5,keyasint,omitempty" json:"until,omitempty"`
	// TimeLimit: the claim ran to its task's time limit and the leader
	// ended it there (At is the limit); no fail was written, the failure
	// is derived from the claim's lease, and shows once the claim is over.
	TimeLimit bool `cbor:"6,keyasint,omitempty" json:"time_limit,omitempty"`
	// NoRetry: the fail said not to retry (a handler's SkipRetry); the
	// task went dead with it.
	NoRetry bool `cbor:"7,keyasint,omitempty" json:"no_retry,omitempty"`
}

// PingResponse answers OpPing.
type PingResponse struct {
	NodeID uint64 `cbor:"1,keyasint" json:"node_id,string"`
	Time   int64  `cbor:"2,keyasint" json:"time"`
}

// ClusterResponse answers OpCluster: who is in the cluster, the metadata
// group, and where every partition lives.
type ClusterResponse struct {
	ClusterID  string          `cbor:"1,keyasint" json:"cluster_id"`
	Self       uint64          `cbor:"2,keyasint" json:"self,string"`
	Members    []MemberView    `cbor:"3,keyasint" json:"members"`
	Raft       RaftView        `cbor:"4,keyasint" json:"raft"`
	Partitions []PartitionView `cbor:"5,keyasint" json:"partitions"`
	// Clock is the answering node's clock against the cluster's.
	Clock *ClockView `cbor:"6,keyasint,omitempty" json:"clock,omitempty"`
	// AAE is the answering node's anti-entropy work since it started.
	AAE *AAEView `cbor:"7,keyasint,omitempty" json:"aae,omitempty"`
	// ClusterVersion is the cluster version the cluster runs.
	ClusterVersion uint32 `cbor:"8,keyasint,omitempty" json:"cluster_version,omitempty"`
}

// AAEView counts a node's anti-entropy rounds (as a partition leader, one
// per follower and partition), those that found the replicas equal, the
// records it pulled and pushed to repair them, the bytes of the tree
// exchanges, and the memory of its trees (fixed by their shape).
type AAEView struct {
	Rounds    int64 `cbor:"1,keyasint" json:"rounds"`
	InSync    int64 `cbor:"2,keyasint" json:"in_sync"`
	Pulled    int64 `cbor:"3,keyasint" json:"pulled"`
	Pushed    int64 `cbor:"4,keyasint" json:"pushed"`
	Bytes     int64 `cbor:"5,keyasint" json:"bytes"`
	TreeBytes int64 `cbor:"6,keyasint" json:"tree_bytes"`
}

// ClockView is a node's clock as it judges it from its peers' readings:
// AheadMs is how far it is ahead of the cluster's median (negative:
// behind); Drifting means ahead by more than MaxDriftMs, and then the node
// leads nothing and grants no claims.
type ClockView struct {
	AheadMs    int64       `cbor:"1,keyasint" json:"ahead_ms"`
	Drifting   bool        `cbor:"2,keyasint,omitempty" json:"drifting"`
	Reason     string      `cbor:"3,keyasint,omitempty" json:"reason,omitempty"`
	MaxDriftMs int64       `cbor:"4,keyasint" json:"max_drift_ms"`
	Peers      []PeerClock `cbor:"5,keyasint,omitempty" json:"peers,omitempty"`
}

// PeerClock is one peer's estimated clock offset (peer minus this node)
// and the round trip of the sample it comes from.
type PeerClock struct {
	ID       uint64 `cbor:"1,keyasint" json:"id,string"`
	OffsetMs int64  `cbor:"2,keyasint" json:"offset_ms"`
	RTTUs    int64  `cbor:"3,keyasint" json:"rtt_us"`
}

// MemberView is one node as the answering node sees it. State is alive,
// suspect, dead or left (from gossip), or unknown for a registered node
// gossip has not heard of.
type MemberView struct {
	ID    uint64 `cbor:"1,keyasint" json:"id,string"`
	Addr  string `cbor:"2,keyasint" json:"addr"`
	State string `cbor:"3,keyasint" json:"state"`
	// Raft is the node's role in the metadata group: voter, learner or
	// none.
	Raft string `cbor:"4,keyasint" json:"raft"`
	// Retiring: the node is being decommissioned.
	Retiring bool `cbor:"5,keyasint,omitempty" json:"retiring,omitempty"`
}

// RaftView is the metadata group.
type RaftView struct {
	Leader   uint64  `cbor:"1,keyasint" json:"leader,string"`
	Voters   NodeIDs `cbor:"2,keyasint" json:"voters"`
	Learners NodeIDs `cbor:"3,keyasint,omitempty" json:"learners,omitempty"`
	Applied  uint64  `cbor:"4,keyasint" json:"applied"`
}

// NodeIDs is a list of node ids. In JSON each is a string of digits, as
// every node id is (the ",string" option on a single one): node ids are
// 64-bit and random, and JSON numbers above 2^53 lose digits in
// JavaScript and jq.
type NodeIDs []uint64

// MarshalJSON encodes the ids as strings.
func (ids NodeIDs) MarshalJSON() ([]byte, error) {
	if ids == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 2+len(ids)*22)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendUint(b, id, 10)
		b = append(b, '"')
	}
	return append(b, ']'), nil
}

// UnmarshalJSON takes the ids as strings (or as numbers, as builds before
// this one sent them).
func (ids *NodeIDs) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*ids = nil
		return nil
	}
	out := make(NodeIDs, len(raw))
	for i, r := range raw {
		s := strings.Trim(string(r), `"`)
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: node id %s is not a number", task.ErrInvalid, r)
		}
		out[i] = v
	}
	*ids = out
	return nil
}

// PartitionView is one partition's placement.
type PartitionView struct {
	Partition int     `cbor:"1,keyasint" json:"partition"`
	Cohort    NodeIDs `cbor:"2,keyasint" json:"cohort"`
	Leader    uint64  `cbor:"3,keyasint" json:"leader,string"`
	Epoch     uint64  `cbor:"4,keyasint" json:"epoch"`
}

// RaftBatch carries marshaled raft messages from one node to another.
type RaftBatch struct {
	Msgs [][]byte `cbor:"1,keyasint"`
}

// GossipPacket is one memberlist packet.
type GossipPacket struct {
	Data []byte `cbor:"1,keyasint"`
}

// JoinRequest asks to add the caller (its id is the one it proved in the
// connection's hello) to the cluster, reachable at Addr.
type JoinRequest struct {
	Addr string `cbor:"1,keyasint"`
}

// JoinResponse says which cluster the caller joined.
type JoinResponse struct {
	ClusterID  string `cbor:"1,keyasint"`
	Partitions int    `cbor:"2,keyasint"`
	Replicas   int    `cbor:"3,keyasint"`
}

// Peer ops of partition replication and leadership. Never renumber.
const (
	// OpPromise asks a replica to promise an epoch (handoff step 3).
	OpPromise Op = 103
	// OpInstall wrote a claim set into a replica, a handoff step that
	// whole-record carries replaced; retired, its number never reused.
	OpInstall Op = 104
	// OpReplicate carries task records from a partition leader to its
	// cohort; one request carries many writes of many partitions.
	OpReplicate Op = 105
	// OpExport streams a partition's records from an id on (ExportPage
	// frames): the transfer to a new cohort member.
	OpExport Op = 106
	// OpTakeover asks a cohort member to run the handoff and lead a
	// partition with a given cohort.
	OpTakeover Op = 107
	// OpPull asks a new cohort member to copy a partition from a node.
	OpPull Op = 108
	// OpSummary carries a leader's best ready head per queue (claim
	// routing).
	OpSummary Op = 109
	// OpDependents asks a dep's leader to record tasks waiting on it
	// (DependentsRequest); it answers whether the dep is completed.
	OpDependents Op = 110
	// OpDepDone tells a dependent's leader that a dep completed
	// (DepDoneRequest).
	OpDepDone Op = 111
	// OpRelease asks a partition's leader whether a node that left the
	// cohort may drop its copy (ReleaseRequest).
	OpRelease Op = 112
	// OpAAENodes asks a replica for digests of its anti-entropy tree
	// (AAERequest, AAEResponse).
	OpAAENodes Op = 113
	// OpAAEBuckets asks a replica for the (id, digest) lists of buckets of
	// its tree (AAERequest, AAEBucketsResponse).
	OpAAEBuckets Op = 114
	// OpAAEFetch asks a replica for whole records (AAEFetchRequest,
	// AAEFetchResponse).
	OpAAEFetch Op = 115
	// OpGCInfo asks a leader what it holds of tasks of partitions it
	// leads, for a garbage-collection check (GCInfoRequest, GCInfoResponse).
	OpGCInfo Op = 116
	// OpHintPut asks a node to keep hints of tasks whose coordinator
	// could not write them to W replicas of their cohort
	// (HintPutRequest): synced before the answer, handed over as the
	// node's own hints.
	OpHintPut Op = 117
	// OpAbandoned tells the leader the registry names for a partition
	// that the sender gave up a handoff of it, having asked promises up
	// to an epoch above the registry's (AbandonedRequest): a promise of
	// the sender's may keep the receiver from leading, and it need not
	// wait out its promise grace to take the partition back.
	OpAbandoned Op = 118
	// OpBuildInfo asks a node about its build (BuildInfoRequest,
	// BuildInfo): the highest cluster version it supports, whether it
	// holds upgrades back. A build before versions answers CodeUnknownOp.
	OpBuildInfo Op = 119
)

func init() {
	opNames[OpPromise], opNames[OpInstall], opNames[OpReplicate] = "promise", "install", "replicate"
	opNames[OpExport], opNames[OpTakeover], opNames[OpPull] = "export", "takeover", "pull"
	opNames[OpSummary], opNames[OpDependents], opNames[OpDepDone] = "summary", "dependents", "dep_done"
	opNames[OpRelease] = "release"
	opNames[OpAAENodes], opNames[OpAAEBuckets], opNames[OpAAEFetch] = "aae_nodes", "aae_buckets", "aae_fetch"
	opNames[OpGCInfo], opNames[OpHintPut], opNames[OpAbandoned] = "gc_info", "hint_put", "abandoned"
	opNames[OpBuildInfo] = "build_info"
}

// AbandonedRequest says that the sender gave up its handoff of Part,
// whose attempts asked promises of epochs up to Epoch (OpAbandoned).
type AbandonedRequest struct {
	Part  int    `cbor:"1,keyasint"`
	Epoch uint64 `cbor:"2,keyasint"`
}

// HintPutRequest carries tasks without key or deps, each written by its
// coordinator with W (the acks the enqueue asked for), for the receiver
// to keep as hints (OpHintPut).
type HintPutRequest struct {
	W     int          `cbor:"1,keyasint"`
	Specs []*task.Spec `cbor:"2,keyasint"`
}

// GCInfoRequest asks a leader about IDs, all of partitions it leads.
type GCInfoRequest struct {
	IDs []task.ID `cbor:"1,keyasint"`
}

// GCInfoResponse has one GCTask per id asked, in order.
type GCInfoResponse struct {
	Tasks []GCTask `cbor:"1,keyasint"`
}

// GCTask is what a leader holds of a task (see partition.GCInfo):
// Status 0 unknown, 1 open, 2 completed at CompletedAt, 3 collected.
type GCTask struct {
	ID          task.ID   `cbor:"1,keyasint"`
	Status      uint8     `cbor:"2,keyasint,omitempty"`
	CompletedAt int64     `cbor:"3,keyasint,omitempty"`
	Deps        []task.ID `cbor:"4,keyasint,omitempty"`
	Dependents  []task.ID `cbor:"5,keyasint,omitempty"`
	// Queue is the task's queue (whose retention judges it).
	Queue string `cbor:"6,keyasint,omitempty"`
}

// AAERequest carries an anti-entropy request of partition Part in the
// antientropy package's own encoding (wire does not know the tree).
type AAERequest struct {
	Part uint16 `cbor:"1,keyasint"`
	Body []byte `cbor:"2,keyasint"`
}

// AAEResponse carries the encoded digests a tree request asked for.
type AAEResponse struct {
	Body []byte `cbor:"1,keyasint"`
}

// AAEBucketsResponse carries one encoded entry list per bucket asked for,
// in the order asked.
type AAEBucketsResponse struct {
	Lists [][]byte `cbor:"1,keyasint"`
}

// AAEFetchRequest asks for the whole records of IDs of Part.
type AAEFetchRequest struct {
	Part uint16    `cbor:"1,keyasint"`
	IDs  []task.ID `cbor:"2,keyasint"`
}

// AAEFetchResponse has the records the replica holds of the first Done
// ids asked for (unknown ids left out): a response stops early to stay
// inside a frame, and the asker asks again for the rest.
type AAEFetchResponse struct {
	Records []task.Record `cbor:"1,keyasint"`
	Done    int           `cbor:"2,keyasint"`
}

// ReleaseRequest asks Part's leader whether Node, no longer in its cohort,
// may drop its copy; a plain acknowledgement means yes. Root is the root
// of Node's anti-entropy tree of Part when it asked (16 bytes): the yes
// holds for the copy as it was then.
type ReleaseRequest struct {
	Part uint16 `cbor:"1,keyasint"`
	Node uint64 `cbor:"2,keyasint"`
	Root []byte `cbor:"3,keyasint"`
}

// DependentsRequest records that each of Dependents waits on Dep.
type DependentsRequest struct {
	Dep        task.ID   `cbor:"1,keyasint"`
	Dependents []task.ID `cbor:"2,keyasint"`
}

// DependentsResponse says whether Dep was completed when the edges were
// written.
type DependentsResponse struct {
	Completed bool `cbor:"1,keyasint,omitempty"`
}

// DepDoneRequest says Dep completed; Tasks wait on it.
type DepDoneRequest struct {
	Dep   task.ID   `cbor:"1,keyasint"`
	Tasks []task.ID `cbor:"2,keyasint"`
}

// PromiseRequest asks for a promise of Epoch to Candidate for Part.
type PromiseRequest struct {
	Part      int    `cbor:"1,keyasint"`
	Epoch     uint64 `cbor:"2,keyasint"`
	Candidate uint64 `cbor:"3,keyasint"`
}

// PromiseResponse is a replica's answer to a promise request.
//
// A refusal is an answer, not an error, so that it can name the epoch the
// candidate must pass: Refused, with the epoch the replica promised and
// the candidate it promised it to.
//
// Key 1 was the replica's claim set, retired when the handoff began to
// carry whole records (the epoch stamps): never reuse it. A claim has one
// type, task.Claim.
type PromiseResponse struct {
	Refused  bool   `cbor:"2,keyasint,omitempty"`
	Promised uint64 `cbor:"3,keyasint,omitempty"`
	To       uint64 `cbor:"4,keyasint,omitempty"`
}

// ReplicateItem is a batch of records of one partition at its leader's
// epoch, or (Direct) an enqueue's new tasks from its coordinator.
type ReplicateItem struct {
	Part    uint16        `cbor:"1,keyasint"`
	Epoch   uint64        `cbor:"2,keyasint"`
	Records []task.Record `cbor:"3,keyasint"`
	// Direct: the records are new tasks of an enqueue, each a spec alone
	// (no state, updates, edges or tombstone), written by the enqueue's
	// coordinator to every replica of the cohort, leader or not (docs/design.md,
	// Operations: enqueue is the AP half). Epoch is 0 and not checked: a
	// spec is a grow-only fact, and the epoch rules guard the claim path.
	// A replica takes them as its leader's Enqueue would (an id held with
	// other content refuses the whole item, task.ErrConflict).
	Direct bool `cbor:"4,keyasint,omitempty"`
}

// ReplicateRequest carries many items; the response says, per item, what
// failed.
type ReplicateRequest struct {
	Items []ReplicateItem `cbor:"1,keyasint"`
}

// ReplicateResponse has one result per item, in order.
type ReplicateResponse struct {
	Results []ReplicateResult `cbor:"1,keyasint"`
}

// ReplicateResult is the outcome of one item: Err (a whole-item failure,
// such as a stale epoch) or per-record errors (nil entries: merged). Errors
// carry the code of the error table so the leader can tell them apart.
type ReplicateResult struct {
	Code    Code     `cbor:"1,keyasint,omitempty"`
	Err     string   `cbor:"2,keyasint,omitempty"`
	Records []Result `cbor:"3,keyasint,omitempty"`
}

// Result is one record's outcome: CodeOK, or an error code and message.
type Result struct {
	Code Code   `cbor:"1,keyasint,omitempty"`
	Err  string `cbor:"2,keyasint,omitempty"`
}

// ExportRequest asks for Part's records with id >= From, all of them to
// the partition's end, in pages of at most Limit records (a transfer); to
// read given ids, use OpAAEFetch.
type ExportRequest struct {
	Part  uint16  `cbor:"1,keyasint"`
	From  task.ID `cbor:"2,keyasint"`
	Limit int     `cbor:"3,keyasint"`
}

// ExportPage is a page of an export; Done ends it.
type ExportPage struct {
	Records []task.Record `cbor:"1,keyasint"`
	Done    bool          `cbor:"2,keyasint,omitempty"`
	// Epoch is the epoch the exporting replica led its partition at when
	// it read the page (0: it did not lead): the receiver takes a page
	// only from a leader, as that leader's word (partition.Source).
	Epoch uint64 `cbor:"3,keyasint,omitempty"`
}

// TakeoverRequest asks a node to lead Part with Cohort.
type TakeoverRequest struct {
	Part   int      `cbor:"1,keyasint"`
	Cohort []uint64 `cbor:"2,keyasint"`
}

// PullRequest asks the receiver to copy Part from node From.
type PullRequest struct {
	Part int    `cbor:"1,keyasint"`
	From uint64 `cbor:"2,keyasint"`
}

// PullResponse says how many records were copied.
type PullResponse struct {
	Records int `cbor:"1,keyasint"`
}

// GCRequest runs a garbage-collection pass over every partition now;
// with DryRun it only reports what the pass would collect.
type GCRequest struct {
	DryRun bool `cbor:"1,keyasint,omitempty" json:"dry_run,omitempty"`
}

// GCResponse is what a pass found, summed over the leaders. Candidates
// are completed tasks past retention; Collectable of them have a whole
// dependency component completed and past retention (Queues and Sample
// break them down); Collected is 0 on a dry run. Held counts the
// components kept (an open or recent task, a dependent added meanwhile,
// too large to check) and Unreached those that could not be checked or
// collected (a leader did not answer, a leadership change) and wait for
// the next pass; a component spread over several leaders counts at each.
type GCResponse struct {
	DryRun      bool      `cbor:"1,keyasint,omitempty" json:"dry_run"`
	Cutoff      int64     `cbor:"2,keyasint" json:"cutoff"`
	Partitions  int       `cbor:"3,keyasint" json:"partitions"`
	Candidates  int64     `cbor:"4,keyasint" json:"candidates"`
	Collectable int64     `cbor:"5,keyasint" json:"collectable"`
	Collected   int64     `cbor:"6,keyasint" json:"collected"`
	Held        int64     `cbor:"7,keyasint" json:"held"`
	Unreached   int64     `cbor:"8,keyasint" json:"unreached"`
	Queues      []GCQueue `cbor:"9,keyasint" json:"queues"`
	// Sample lists some of the collectable tasks (at most GCSample).
	Sample []task.ID `cbor:"10,keyasint" json:"sample"`
}

// GCSample bounds GCResponse.Sample.
const GCSample = 100

// GCQueue counts one queue's collectable tasks.
type GCQueue struct {
	Queue string `cbor:"1,keyasint" json:"queue"`
	Tasks int64  `cbor:"2,keyasint" json:"tasks"`
}

// LeaveResponse answers OpLeave: the node handed the leadership of
// HandedOff partitions to other cohort members and is shutting down.
type LeaveResponse struct {
	HandedOff int `cbor:"1,keyasint" json:"handed_off"`
	Failed    int `cbor:"2,keyasint,omitempty" json:"failed,omitempty"`
}

// Summary is a node's best ready head of each queue among the partitions
// it leads.
type Summary struct {
	Heads []QueueHead `cbor:"1,keyasint"`
}

// QueueHead is one queue's best ready task on a node.
type QueueHead struct {
	Queue    string  `cbor:"1,keyasint"`
	Priority int32   `cbor:"2,keyasint,omitempty"`
	ID       task.ID `cbor:"3,keyasint"`
}

// QueueGetRequest reads a queue's settings.
type QueueGetRequest struct {
	Queue string `cbor:"1,keyasint" json:"queue"`
}

// QueueSetRequest changes a queue's settings cluster-wide: each field
// given replaces the queue's (0 resets a number to the node's default);
// the others stay. A task's own max attempts, a claim's own TTL and a
// fail's own retry-after override the queue's.
type QueueSetRequest struct {
	Queue string `cbor:"1,keyasint" json:"queue"`
	// MaxAttempts applies to the queue's tasks enqueued without one.
	MaxAttempts *uint32 `cbor:"2,keyasint,omitempty" json:"max_attempts,omitempty"`
	// DefaultTTLMs is the lease of a claim that asks for none.
	DefaultTTLMs *int64 `cbor:"3,keyasint,omitempty" json:"default_ttl_ms,omitempty"`
	// BackoffBaseMs and BackoffMaxMs shape the delay after a failed
	// attempt that names none: base·2^(attempts-1), at most max.
	BackoffBaseMs *int64 `cbor:"4,keyasint,omitempty" json:"backoff_base_ms,omitempty"`
	BackoffMaxMs  *int64 `cbor:"5,keyasint,omitempty" json:"backoff_max_ms,omitempty"`
	// Paused: the queue takes enqueues and grants no claims.
	Paused *bool `cbor:"6,keyasint,omitempty" json:"paused,omitempty"`
	// RetentionMs is how long the queue's ended (completed or cancelled)
	// tasks are kept before garbage collection.
	RetentionMs *int64 `cbor:"7,keyasint,omitempty" json:"retention_ms,omitempty"`
	// TimeLimitMs is the time limit of the queue's tasks enqueued without
	// one: how long one claim may run.
	TimeLimitMs *int64 `cbor:"8,keyasint,omitempty" json:"time_limit_ms,omitempty"`
	// VisibilityMs, Batch and LongPollMs are the defaults of the Workers
	// that serve the queue: the limit on one claim's whole batch, the
	// most tasks one claim asks for, the long-poll of a claim once the
	// queue was found empty.
	VisibilityMs *int64  `cbor:"9,keyasint,omitempty" json:"visibility_ms,omitempty"`
	Batch        *uint32 `cbor:"10,keyasint,omitempty" json:"batch,omitempty"`
	LongPollMs   *int64  `cbor:"11,keyasint,omitempty" json:"long_poll_ms,omitempty"`
	// Hint: the queue's enqueues are hinted when their cohort cannot be
	// reached, as if each asked for it (EnqueueRequest.Hint).
	Hint *bool `cbor:"12,keyasint,omitempty" json:"hint,omitempty"`
}

// QueueSettings is a queue's settings as every node applies them; a 0
// is the node's default.
type QueueSettings struct {
	Queue         string `cbor:"1,keyasint" json:"queue"`
	MaxAttempts   uint32 `cbor:"2,keyasint,omitempty" json:"max_attempts"`
	DefaultTTLMs  int64  `cbor:"3,keyasint,omitempty" json:"default_ttl_ms"`
	BackoffBaseMs int64  `cbor:"4,keyasint,omitempty" json:"backoff_base_ms"`
	BackoffMaxMs  int64  `cbor:"5,keyasint,omitempty" json:"backoff_max_ms"`
	RetentionMs   int64  `cbor:"7,keyasint,omitempty" json:"retention_ms"`
	Paused        bool   `cbor:"6,keyasint,omitempty" json:"paused"`
	TimeLimitMs   int64  `cbor:"8,keyasint,omitempty" json:"time_limit_ms"`
	VisibilityMs  int64  `cbor:"9,keyasint,omitempty" json:"visibility_ms"`
	Batch         uint32 `cbor:"10,keyasint,omitempty" json:"batch"`
	LongPollMs    int64  `cbor:"11,keyasint,omitempty" json:"long_poll_ms"`
	Hint          bool   `cbor:"12,keyasint,omitempty" json:"hint"`
}

// ScheduleSetRequest creates or replaces a periodic task: every EveryMs,
// or at the times of the five-field cron expression Cron (UTC), a task
// with Data and Priority is enqueued in Queue. Setting the spec a
// schedule has already changes nothing; another spec under the name
// replaces it from now on.
type ScheduleSetRequest struct {
	Name     string `cbor:"1,keyasint" json:"name"`
	Queue    string `cbor:"2,keyasint" json:"queue"`
	EveryMs  int64  `cbor:"3,keyasint,omitempty" json:"every_ms,omitempty"`
	Cron     string `cbor:"4,keyasint,omitempty" json:"cron,omitempty"`
	Data     []byte `cbor:"5,keyasint,omitempty" json:"data,omitempty"`
	Priority int32  `cbor:"6,keyasint,omitempty" json:"priority,omitempty"`
	// CatchUp is what happens to occurrences missed while the cluster
	// could not enqueue them: "skip" (the default) drops them, "all"
	// enqueues those of the last day late.
	CatchUp string `cbor:"7,keyasint,omitempty" json:"catch_up,omitempty"`
}

// ScheduleView is a periodic task as the cluster holds it.
type ScheduleView struct {
	Name     string `cbor:"1,keyasint" json:"name"`
	Queue    string `cbor:"2,keyasint" json:"queue"`
	EveryMs  int64  `cbor:"3,keyasint,omitempty" json:"every_ms,omitempty"`
	Cron     string `cbor:"4,keyasint,omitempty" json:"cron,omitempty"`
	Data     []byte `cbor:"5,keyasint,omitempty" json:"data,omitempty"`
	Priority int32  `cbor:"6,keyasint,omitempty" json:"priority,omitempty"`
	CatchUp  string `cbor:"7,keyasint" json:"catch_up"`
	// Version changes each time the schedule is set to another spec; it
	// is part of its occurrences' keys ("schedule:NAME:VERSION:TIME").
	Version uint64 `cbor:"8,keyasint" json:"version"`
	// Start is when this version was set; Done the last occurrence
	// handled (enqueued or skipped); Next the one after it (0: none).
	Start int64 `cbor:"9,keyasint" json:"start"`
	Done  int64 `cbor:"10,keyasint" json:"done"`
	Next  int64 `cbor:"11,keyasint,omitempty" json:"next,omitempty"`
	// Enqueued and Skipped count the occurrences handled each way.
	Enqueued uint64 `cbor:"12,keyasint" json:"enqueued"`
	Skipped  uint64 `cbor:"13,keyasint" json:"skipped"`
}

// OccurrenceKeyPrefix starts the unique key of every task a schedule
// enqueues.
const OccurrenceKeyPrefix = "schedule:"

// OccurrenceKey is the unique key of the task of a schedule's occurrence
// at atMs (Unix ms): "schedule:NAME:VERSION:ATMS".
func OccurrenceKey(name string, version uint64, atMs int64) string {
	return OccurrenceKeyPrefix + name + ":" + strconv.FormatUint(version, 10) + ":" + strconv.FormatInt(atMs, 10)
}

// ParseOccurrenceKey is OccurrenceKey's inverse; ok is false for a key
// that is not an occurrence's.
func ParseOccurrenceKey(key string) (name string, version uint64, atMs int64, ok bool) {
	rest, found := strings.CutPrefix(key, OccurrenceKeyPrefix)
	if !found {
		return "", 0, 0, false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 || parts[0] == "" || strings.ContainsAny(parts[0], " \t") {
		return "", 0, 0, false
	}
	v, err1 := strconv.ParseUint(parts[1], 10, 64)
	t, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return parts[0], v, t, true
}

// ScheduleListRequest lists the schedules, or the one named.
type ScheduleListRequest struct {
	Name string `cbor:"1,keyasint,omitempty" json:"name,omitempty"`
}

// ScheduleListResponse lists schedules by name.
type ScheduleListResponse struct {
	Schedules []ScheduleView `cbor:"1,keyasint" json:"schedules"`
}

// ScheduleDeleteRequest deletes a schedule; the tasks it enqueued stay.
type ScheduleDeleteRequest struct {
	Name string `cbor:"1,keyasint" json:"name"`
}

// ScheduleDeleteResponse says whether there was a schedule to delete.
type ScheduleDeleteResponse struct {
	Deleted bool `cbor:"1,keyasint" json:"deleted"`
}

// ShardJoinRequest adds Member (an id the member chose, random) to the
// shard set Set, with a lease of TTLMs. A repeat of a join changes
// nothing.
type ShardJoinRequest struct {
	Set    string `cbor:"1,keyasint" json:"set"`
	Member string `cbor:"2,keyasint" json:"member"`
	TTLMs  int64  `cbor:"3,keyasint" json:"ttl_ms"`
	// Info describes the member for people (host, pid).
	Info string `cbor:"4,keyasint,omitempty" json:"info,omitempty"`
}

// ShardRenewRequest renews Member's lease and says that it holds no work
// of a generation at or below Stopped.
type ShardRenewRequest struct {
	Set     string `cbor:"1,keyasint" json:"set"`
	Member  string `cbor:"2,keyasint" json:"member"`
	Stopped uint64 `cbor:"3,keyasint,omitempty" json:"stopped,omitempty"`
}

// ShardLeaveRequest removes Member from Set; it must have stopped its
// work first.
type ShardLeaveRequest struct {
	Set    string `cbor:"1,keyasint" json:"set"`
	Member string `cbor:"2,keyasint" json:"member"`
}

// ShardMembersRequest reads a shard set.
type ShardMembersRequest struct {
	Set string `cbor:"1,keyasint" json:"set"`
}

// ShardView is a shard set as the metadata group committed it: the
// active generation (its number and count), each member with its index
// in it (-1: none yet), the pending generation if a change waits for the
// active one's members to stop. For a join or renew it also says what
// the caller may do now: Work on Index of Generation (out of Count), or
// stop whatever it works on and say so in its next renewal.
type ShardView struct {
	Set        string            `cbor:"1,keyasint" json:"set"`
	Generation uint64            `cbor:"2,keyasint" json:"generation"`
	Count      uint32            `cbor:"3,keyasint" json:"count"`
	Members    []ShardMemberView `cbor:"4,keyasint" json:"members"`
	Pending    *ShardPendingView `cbor:"5,keyasint,omitempty" json:"pending,omitempty"`
	Index      int32             `cbor:"6,keyasint" json:"index"`
	Work       bool              `cbor:"7,keyasint" json:"work"`
}

// ShardMemberView is one member of a set.
type ShardMemberView struct {
	ID    string `cbor:"1,keyasint" json:"id"`
	Index int32  `cbor:"2,keyasint" json:"index"`
	// Stopped: the member holds no work of a generation at or below it.
	Stopped uint64 `cbor:"3,keyasint,omitempty" json:"stopped,omitempty"`
	TTLMs   int64  `cbor:"4,keyasint" json:"ttl_ms"`
	Info    string `cbor:"5,keyasint,omitempty" json:"info,omitempty"`
}

// ShardPendingView is the generation that takes effect once the active
// one's members stopped.
type ShardPendingView struct {
	Generation uint64 `cbor:"1,keyasint" json:"generation"`
	Count      uint32 `cbor:"2,keyasint" json:"count"`
	// Waiting are the members of the active generation that have not
	// stopped yet.
	Waiting []string `cbor:"3,keyasint,omitempty" json:"waiting,omitempty"`
}
