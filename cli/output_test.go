package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// -o table: values of one type in a row make one table with a header,
// columns aligned and those empty in every row left out; times in the
// printer's location, durations as durations, payloads as text or
// base64; a single value is shown whole, its lists of records as tables
// of their own under their titles.
func TestTablePrinter(t *testing.T) {
	utc := func() *tablePrinter { return &tablePrinter{w: &strings.Builder{}, loc: time.UTC} }
	at := time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC).UnixMilli()
	id := task.MakeID(at, 1, 1)
	p := utc()
	for _, v := range []wire.TaskView{
		{ID: id, Queue: "mail", Data: []byte("hello\nworld"), State: "ready", EnqueuedAt: at},
		{ID: id, Queue: "mail", Data: []byte{0, 1}, State: "dead", EnqueuedAt: at, TimeLimitMs: 90_000},
	} {
		if err := p.Encode(&v); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"ID                                        QUEUE  PRIORITY  DATA         STATE  MAX_ATTEMPTS  ATTEMPTS  ENQUEUED_AT              TIME_LIMIT\n" +
		id.String() + "  mail   0         hello world  ready  0             0         2026-12-07 10:30:00.000  -\n" +
		id.String() + "  mail   0         base64:AAE=  dead   0             0         2026-12-07 10:30:00.000  1m30s\n"
	if got := p.w.(*strings.Builder).String(); got != want {
		t.Errorf("rows:\n%s\nwant:\n%s", got, want)
	}

	p = utc()
	cr := wire.ClusterResponse{
		ClusterID: "c1", Self: 7, ClusterVersion: 2,
		Members: []wire.MemberView{{ID: 7, Addr: "a:1", State: "alive", Raft: "voter"}, {ID: 8, Addr: "b:1", State: "dead", Raft: "voter"}},
		Raft:    wire.RaftView{Leader: 7, Voters: []uint64{7, 8}, Applied: 3},
	}
	if err := p.Encode(&cr); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	want = "" +
		"CLUSTER_ID       c1\n" +
		"SELF             7\n" +
		"CLUSTER_VERSION  2\n" +
		"\n" +
		"MEMBERS\n" +
		"ID  ADDR  STATE  RAFT\n" +
		"7   a:1   alive  voter\n" +
		"8   b:1   dead   voter\n" +
		"\n" +
		"RAFT\n" +
		"LEADER   7\n" +
		"VOTERS   7,8\n" +
		"APPLIED  3\n"
	if got := p.w.(*strings.Builder).String(); got != want {
		t.Errorf("whole:\n%s\nwant:\n%s", got, want)
	}
}
