package httpapi

import (
	"net/http"

	"github.com/skuldd/skuldd/wire"
)

// route is one endpoint: what the mux matches, the query parameters it
// takes (any other is refused), its handler, and what /openapi.json says
// of it. The table below is the one list of the API's endpoints: the mux
// and the OpenAPI description are both built from it, and a test checks
// the description against what the mux answers.
type route struct {
	method, path string
	query        []param
	handler      http.HandlerFunc
	summary      string
	tag          string
	// body is the request body's type (a pointer to its zero value; nil:
	// no body); optionalBody: it may be left out.
	body         any
	optionalBody bool
	// resp is the 200 answer's type; ndjson: a stream of them, one per
	// line; raw: not JSON (the metrics' text).
	resp   any
	ndjson bool
	raw    string
}

// param is one query parameter: its name, its OpenAPI type (string,
// integer or boolean) and what it does.
type param struct {
	name, typ, doc string
}

// Tags group the endpoints in the OpenAPI description.
const (
	tagTasks   = "tasks"
	tagWork    = "work"
	tagQueues  = "queues"
	tagCluster = "cluster"
	tagHealth  = "health"
	tagShards  = "shards"
	tagSched   = "schedules"
	tagAuth    = "auth"
	tagAdmin   = "admin"
)

// enqueueOneBody is POST /v1/tasks's body: one task and the write quorum.
type enqueueOneBody struct {
	wire.EnqueueTask
	W int `json:"w,omitempty"`
}

func (a *api) routes() []route {
	svc := a.svc
	rs := []route{
		{method: "GET", path: "/{$}", handler: a.status, tag: tagHealth, raw: "text/html",
			query:   []param{{"task", "string", "show this task (its id)"}},
			summary: "The status page, for people: members, the metadata group, partitions, queues with rates and lag, recent dead tasks, a task by id"},
		{method: "GET", path: "/healthz", handler: a.healthz, tag: tagHealth, resp: &Health{},
			summary: "Liveness: 200 unless the node is stopping"},
		{method: "GET", path: "/readyz", handler: a.readyz, tag: tagHealth, resp: &Health{},
			summary: "Readiness: 200 when the node can serve (started, clock trusted, a quorum of the metadata group and of the cohorts of the partitions it leads reachable); 503 with the reasons"},
		{method: "GET", path: "/openapi.json", handler: a.openAPI, tag: tagHealth, raw: "application/json",
			summary: "This description of the API (OpenAPI 3)"},

		{method: "POST", path: "/v1/tasks", handler: a.enqueueOne, tag: tagTasks, body: &enqueueOneBody{}, resp: &wire.EnqueueResult{},
			summary: "Enqueue one task"},
		{method: "POST", path: "/v1/enqueue", handler: handle(a, svc.Enqueue), tag: tagTasks, body: &wire.EnqueueRequest{}, resp: &wire.EnqueueResponse{},
			summary: "Enqueue a batch of tasks"},
		{method: "GET", path: "/v1/tasks/{id}", handler: a.get, tag: tagTasks, resp: &wire.TaskView{},
			query: []param{
				{"min_seq", "integer", "answer only from a replica whose history of the task reaches this sequence number"},
				{"r", "integer", "how many replicas to read (default: the node's read quorum)"},
			},
			summary: "Read one task"},
		{method: "GET", path: "/v1/tasks", handler: a.list, tag: tagTasks, resp: &wire.TaskView{}, ndjson: true,
			query: []param{
				{"queue", "string", "only this queue's tasks"},
				{"state", "string", "only tasks in this state (ready, claimed, delayed, blocked, completed, dead, cancelled)"},
				{"group", "string", "only this group's tasks"},
				{"kind", "string", "only tasks of this kind"},
				{"subtopic", "string", "only this subtopic's tasks"},
				{"limit", "integer", "at most this many tasks"},
				{"after", "string", "the cursor: only the tasks after it in the listing's order (the last id of the previous page)"},
				{"desc", "boolean", "newest first (descending id order)"},
			},
			summary: "List tasks in id order (enqueue order) across the cluster, as NDJSON (one task per line); page with limit and after"},
		{method: "DELETE", path: "/v1/tasks/{id}", handler: a.delete, tag: tagTasks, resp: &wire.Ack{},
			summary: "Delete one task"},
		{method: "POST", path: "/v1/delete", handler: handle(a, svc.Delete), tag: tagTasks, body: &wire.DeleteRequest{}, resp: &wire.Ack{},
			summary: "Delete one task"},
		{method: "POST", path: "/v1/cancel", handler: handle(a, svc.Cancel), tag: tagTasks, body: &wire.CancelRequest{}, resp: &wire.Ack{},
			summary: "Cancel one task"},
		{method: "POST", path: "/v1/requeue", handler: handle(a, svc.Requeue), tag: tagTasks, body: &wire.RequeueRequest{}, resp: &wire.Ack{},
			summary: "Requeue a dead task"},
		{method: "GET", path: "/v1/count", handler: a.count, tag: tagTasks, resp: &wire.CountResponse{},
			query: []param{
				{"queue", "string", "the queue to count"},
				{"subtopic", "string", "only this subtopic's tasks"},
			},
			summary: "Count a queue's ready tasks"},

		{method: "POST", path: "/v1/claim", handler: handle(a, svc.Claim), tag: tagWork, body: &wire.ClaimRequest{}, resp: &wire.ClaimResponse{},
			summary: "Claim tasks (long-polls up to the request's wait)"},
		{method: "POST", path: "/v1/renew", handler: handle(a, svc.Renew), tag: tagWork, body: &wire.RenewRequest{}, resp: &wire.RenewResponse{},
			summary: "Renew a claim"},
		{method: "POST", path: "/v1/update", handler: handle(a, svc.Update), tag: tagWork, body: &wire.UpdateRequest{}, resp: &wire.Ack{},
			summary: "Log progress under a claim"},
		{method: "POST", path: "/v1/complete", handler: handle(a, svc.Complete), tag: tagWork, body: &wire.CompleteRequest{}, resp: &wire.CompleteResponse{},
			summary: "Complete a claimed task"},
		{method: "POST", path: "/v1/fail", handler: handle(a, svc.Fail), tag: tagWork, body: &wire.FailRequest{}, resp: &wire.Ack{},
			summary: "Fail a claimed task (retried, or dead after its attempts)"},
		{method: "POST", path: "/v1/snooze", handler: handle(a, svc.Snooze), tag: tagWork, body: &wire.SnoozeRequest{}, resp: &wire.Ack{},
			summary: "Give a claimed task back, ready again after a delay"},

		{method: "GET", path: "/v1/queues", handler: a.queues, tag: tagQueues, resp: &wire.QueuesResponse{},
			query:   []param{{"subtopics", "boolean", "also count each queue's subtopics"}},
			summary: "Every queue's tasks by state"},
		{method: "GET", path: "/v1/queues/{queue}/settings", handler: a.queueGet, tag: tagQueues, resp: &wire.QueueSettings{},
			summary: "A queue's settings"},
		{method: "POST", path: "/v1/queues/{queue}/settings", handler: a.queueSet, tag: tagQueues, body: &wire.QueueSetRequest{}, resp: &wire.QueueSettings{},
			summary: "Change a queue's settings (the fields given)"},
		{method: "POST", path: "/v1/queues/{queue}/pause", handler: a.queuePause(true), tag: tagQueues, resp: &wire.QueueSettings{},
			summary: "Pause a queue: nothing is claimed from it"},
		{method: "POST", path: "/v1/queues/{queue}/resume", handler: a.queuePause(false), tag: tagQueues, resp: &wire.QueueSettings{},
			summary: "Resume a paused queue"},
		{method: "POST", path: "/v1/queues/{queue}/dead/requeue", handler: a.dead(svc.RequeueDead), tag: tagQueues, resp: &wire.BulkResponse{},
			summary: "Requeue every dead task of a queue"},
		{method: "POST", path: "/v1/queues/{queue}/dead/purge", handler: a.dead(svc.PurgeDead), tag: tagQueues, resp: &wire.BulkResponse{},
			summary: "Delete every dead task of a queue"},
		{method: "GET", path: "/v1/groups/{group}", handler: a.group, tag: tagQueues, resp: &wire.GroupResponse{},
			query:   []param{{"dead", "integer", "also list up to this many of the group's dead tasks"}},
			summary: "A task group's tasks by state"},
		{method: "POST", path: "/v1/groups/{group}/cancel", handler: a.groupCancel, tag: tagQueues, body: &wire.GroupCancelRequest{}, optionalBody: true, resp: &wire.BulkResponse{},
			summary: "Cancel every task of a group that has not ended"},

		{method: "GET", path: "/v1/cluster", handler: a.cluster, tag: tagCluster, resp: &wire.ClusterResponse{},
			summary: "Members, the metadata group and where every partition lives"},
		{method: "GET", path: "/v1/hints", handler: a.hints, tag: tagCluster, resp: &wire.HintsResponse{},
			query:   []param{{"limit", "integer", "list at most this many hints"}},
			summary: "The hinted enqueues this node holds"},
		{method: "POST", path: "/v1/gc", handler: handle(a, svc.GC), tag: tagCluster, body: &wire.GCRequest{}, resp: &wire.GCResponse{},
			summary: "Run a garbage-collection pass over the cluster (or a dry run)"},
		{method: "POST", path: "/v1/leave", handler: a.leave, tag: tagCluster, resp: &wire.LeaveResponse{},
			summary: "Hand this node's partitions to others and shut it down"},

		{method: "GET", path: "/v1/schedules", handler: a.scheduleList, tag: tagSched, resp: &wire.ScheduleListResponse{},
			summary: "Every periodic task"},
		{method: "GET", path: "/v1/schedules/{name}", handler: a.scheduleList, tag: tagSched, resp: &wire.ScheduleListResponse{},
			summary: "One periodic task"},
		{method: "PUT", path: "/v1/schedules/{name}", handler: a.scheduleSet, tag: tagSched, body: &wire.ScheduleSetRequest{}, resp: &wire.ScheduleView{},
			summary: "Create or replace a periodic task"},
		{method: "DELETE", path: "/v1/schedules/{name}", handler: a.scheduleDelete, tag: tagSched, resp: &wire.ScheduleDeleteResponse{},
			summary: "Delete a periodic task"},

		{method: "POST", path: "/v1/shards/join", handler: handle(a, svc.ShardJoin), tag: tagShards, body: &wire.ShardJoinRequest{}, resp: &wire.ShardView{},
			summary: "Join a worker shard set"},
		{method: "POST", path: "/v1/shards/renew", handler: handle(a, svc.ShardRenew), tag: tagShards, body: &wire.ShardRenewRequest{}, resp: &wire.ShardView{},
			summary: "Renew a shard member's lease (and acknowledge a generation)"},
		{method: "POST", path: "/v1/shards/leave", handler: handle(a, svc.ShardLeave), tag: tagShards, body: &wire.ShardLeaveRequest{}, resp: &wire.ShardView{},
			summary: "Leave a worker shard set"},
		{method: "GET", path: "/v1/shards/{set}", handler: a.shardMembers, tag: tagShards, resp: &wire.ShardView{},
			summary: "A shard set's members and generation"},
	}
	if as, ok := svc.(wire.AuthService); ok {
		rs = append(rs,
			route{method: "GET", path: "/v1/auth/credentials", handler: a.authList(as), tag: tagAuth, resp: &wire.AuthListResponse{},
				summary: "The client credentials: name, role, id (admin only)"},
			route{method: "POST", path: "/v1/auth/credentials", handler: handle(a, as.AuthCreate), tag: tagAuth, body: &wire.AuthCreateRequest{}, resp: &wire.CredentialView{},
				summary: "Add a client credential: its id, name, role and keys (the client makes the token and keeps it: skuldd ctl auth create does; admin only)"},
			route{method: "DELETE", path: "/v1/auth/credentials/{name}", handler: a.authRevoke(as), tag: tagAuth, resp: &wire.AuthRevokeResponse{},
				summary: "Revoke a client credential, by name (admin only; every node refuses it within a second)"},
		)
	}
	if ad, ok := svc.(wire.AdminService); ok {
		rs = append(rs,
			route{method: "GET", path: "/v1/upgrade", handler: a.upgrade(ad, false), tag: tagAdmin, resp: &wire.UpgradeStatus{},
				summary: "The cluster version and what each member's build supports (admin only)"},
			route{method: "POST", path: "/v1/upgrade/finalize", handler: a.upgrade(ad, true), tag: tagAdmin, resp: &wire.UpgradeStatus{},
				summary: "Raise the cluster version to the highest every member supports (admin only; no rollback past it)"},
			route{method: "POST", path: "/v1/nodes/{node}/decommission", handler: a.decommission(ad), tag: tagAdmin, body: &wire.DecommissionRequest{}, optionalBody: true, resp: &wire.DecommissionStatus{},
				summary: "Move a live node's partitions to the others (or, with cancel, stop); says how many are left (admin only)"},
			route{method: "DELETE", path: "/v1/nodes/{node}", handler: a.removeNode(ad), tag: tagAdmin, resp: &wire.RemoveNodeResponse{},
				summary: "Forget a node gone for good, once its partitions are refilled (admin only; its id never rejoins)"},
		)
	}
	if a.cfg.Metrics != nil {
		rs = append(rs, route{method: "GET", path: "/metrics", handler: a.cfg.Metrics.ServeHTTP, tag: tagHealth,
			raw: "text/plain", summary: "Prometheus metrics"})
	}
	return rs
}

// names lists the names of ps.
func names(ps []param) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.name
	}
	return out
}
