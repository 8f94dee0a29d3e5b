package httpapi_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/httpapi"
	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// statusService is fakeService with a cluster of two members and a
// queue whose counts grow by 10 enqueued and 4 completed at each read.
type statusService struct {
	fakeService
	reads int64
}

func (s *statusService) Cluster(context.Context) (*wire.ClusterResponse, error) {
	return &wire.ClusterResponse{
		ClusterID: "c1", Self: 1,
		Members: []wire.MemberView{{ID: 1, Addr: "10.0.0.1:13000", State: "alive", Raft: "voter"}, {ID: 2, Addr: "10.0.0.2:13000", State: "dead", Raft: "voter"}},
		Raft:    wire.RaftView{Leader: 1, Voters: []uint64{1, 2}},
		Partitions: []wire.PartitionView{
			{Partition: 0, Cohort: []uint64{1, 2}, Leader: 1, Epoch: 3}, {Partition: 1, Cohort: []uint64{1, 2}, Leader: 1, Epoch: 3},
			{Partition: 2, Cohort: []uint64{2}, Leader: 2, Epoch: 2}, {Partition: 3, Cohort: []uint64{1, 2}, Leader: 1, Epoch: 3},
		},
	}, nil
}

func (s *statusService) Queues(context.Context, *wire.QueuesRequest) (*wire.QueuesResponse, error) {
	s.reads++
	return &wire.QueuesResponse{Queues: []wire.QueueStats{{
		Queue: "mail", Ready: 6 * s.reads, Completed: 4 * s.reads, OldestReadyAt: time.Now().Add(-90 * time.Second).UnixMilli(),
	}}}, nil
}

// The status page shows the members, the partitions by leader (as
// ranges, a dead leader marked), the queues, with rates from the second
// view on and the oldest ready task's age, the dead tasks, and a task by
// id or why not; it loads nothing from elsewhere.
func TestStatusPageContent(t *testing.T) {
	svc := &statusService{}
	h := httpapi.New(httpapi.Config{Service: svc, Live: func() error { return nil }, Ready: func() []string { return []string{"metadata group: no leader"} }, Log: quiet()})
	rec := serve(h, "GET", "/", "")
	body := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	for _, want := range []string{
		"10.0.0.1:13000", "10.0.0.2:13000", "not ready", "metadata group: no leader",
		"0-1, 3", "10.0.0.2:13000 (down)", // partitions by leader
		"Partitions with a replica short of the others: 2.",
		`data-queue="mail"`, "1m30s", // the oldest ready age
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?i)(src|href)="?https?:`).MatchString(body) {
		t.Error("the page refers to something outside the node")
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	// A second view has rates: 10 tasks more and 4 completed since the first.
	time.Sleep(20 * time.Millisecond)
	body = serve(h, "GET", "/", "").Body.String()
	row := regexp.MustCompile(`(?s)<tr data-queue="mail">.*?</tr>`).FindString(body)
	nums := regexp.MustCompile(`>([0-9.]+)<`).FindAllStringSubmatch(row, -1)
	if len(nums) < 9 {
		t.Fatalf("mail's row %q", row)
	}
	if enq, done := nums[7][1], nums[8][1]; enq == "0.0" || done == "0.0" || enq == done {
		t.Errorf("rates: enqueued %s/s, completed %s/s; want both above 0, enqueued higher", enq, done)
	}
	// A task by id, and an id that is not one.
	id := task.MakeID(1_700_000_000_000, 1, 1).String()
	if b := serve(h, "GET", "/?task="+id, "").Body.String(); !strings.Contains(b, `id="task"`) || !strings.Contains(b, "payload") {
		t.Errorf("lookup of %s: no task shown", id)
	}
	if b := serve(h, "GET", "/?task=nope", "").Body.String(); !strings.Contains(b, `id="task-error"`) || !strings.Contains(b, "malformed id") {
		t.Error("lookup of a malformed id: no error shown")
	}
	// Basic credentials with the token as the password open it behind
	// Authenticate.
	guarded := httpapi.Authenticate(h, func(tok string) (wire.Principal, error) {
		if tok != "tok" {
			return wire.Principal{}, wire.ErrUnauthenticated
		}
		return wire.Principal{}, nil
	}, func(wire.Principal) bool { return true })
	r := httpTestRequest("GET", "/")
	r.SetBasicAuth("me", "tok")
	if rec := serveReq(guarded, r); rec.Code != http.StatusOK {
		t.Errorf("with Basic credentials: %d", rec.Code)
	}
	r = httpTestRequest("GET", "/")
	r.SetBasicAuth("me", "wrong")
	if rec := serveReq(guarded, r); rec.Code != http.StatusUnauthorized || !strings.Contains(strings.Join(rec.Header().Values("WWW-Authenticate"), ";"), "Basic") {
		t.Errorf("with a wrong password: %d %v; want 401 with a Basic challenge", rec.Code, rec.Header().Values("WWW-Authenticate"))
	}
}
