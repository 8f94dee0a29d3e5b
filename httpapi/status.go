package httpapi

import (
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/skuldd/skuldd/task"
	"github.com/skuldd/skuldd/wire"
)

// The status page (GET /): what an operator looks at first. It is
// rendered on the server from the node's own API (the cluster view, the
// queues' counts, the dead tasks, a task by id), refreshes itself, and
// needs nothing from outside the node: no script, no external request,
// its style embedded. Each section that cannot be read says why, and the
// others still show.

//go:embed status.html
var statusHTML string

var statusTmpl = template.Must(template.New("status").Funcs(template.FuncMap{
	"ago":      ago,
	"at":       func(ms int64) string { return atTime(ms) },
	"payload":  payloadText,
	"rate":     func(r float64) string { return strconv.FormatFloat(r, 'f', 1, 64) },
	"join":     strings.Join,
	"upper":    strings.ToUpper,
	"add":      func(a, b int) int { return a + b },
	"statecls": stateClass,
}).Parse(statusHTML))

// Status page settings.
const (
	// statusRefresh is how often the page reloads itself, in seconds.
	statusRefresh = 5
	// statusTimeout bounds the reads one page makes (a node cut off
	// answers its sections' errors, not a page that never comes).
	statusTimeout = 4 * time.Second
	// statusDead is how many dead tasks the page lists.
	statusDead = 10
	// rateWindow is the longest gap between two views whose counts the
	// rates are taken from; older ones are too stale to say "now".
	rateWindow = 5 * time.Minute
)

// statusState is what the page keeps between views: each queue's counts at
// the last one, for the rates.
type statusState struct {
	mu   sync.Mutex
	at   time.Time
	prev map[string]wire.QueueStats
}

// statusView is what the template renders.
type statusView struct {
	Refresh    int
	Now        string
	Self       string
	SelfAddr   string
	ClusterID  string
	Ready      []string
	ClusterErr string
	Members    []memberRow
	Raft       raftRow
	Leaders    []leaderRow
	// Short lists the partitions whose cohort has fewer members than the
	// largest cohort (a replica missing, or a move under way).
	Short     string
	Queues    []queueRow
	QueuesErr string
	Dead      []deadRow
	DeadErr   string
	Lookup    string
	Task      *taskDetail
	TaskErr   string
}

type memberRow struct {
	ID, Addr, State, Raft string
	Leader, Self          bool
}

type raftRow struct {
	Leader, Voters, Learners string
	Applied                  uint64
}

// leaderRow is one leader's partitions, as ranges ("0-12, 15").
type leaderRow struct {
	Leader     string
	Count      int
	Partitions string
	Down       bool // the leader is not alive (or there is none)
}

type queueRow struct {
	wire.QueueStats
	// Enqueued and Done are per second since the last view (HasRate).
	Enqueued, Done float64
	HasRate        bool
	OldestAge      string
}

type deadRow struct {
	ID, Queue, Reason, At string
	Attempts              uint32
}

type taskDetail struct {
	View     *wire.TaskView
	Data     string
	Enqueued string
	Claims   []claimRow
	Failures []failureRow
}

type claimRow struct {
	Claim                 uint32
	Start, End, Completed string
}

type failureRow struct {
	Claim      uint32
	At, Reason string
	Snooze     bool
}

// status renders the status page.
func (a *api) status(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
	defer cancel()
	v := statusView{Refresh: statusRefresh, Now: time.Now().Format("2006-01-02 15:04:05 MST")}
	if a.cfg.Ready != nil {
		v.Ready = a.cfg.Ready()
	}
	a.statusCluster(ctx, &v)
	a.statusQueues(ctx, &v)
	a.statusDead(ctx, &v)
	if id := strings.TrimSpace(r.URL.Query().Get("task")); id != "" {
		v.Lookup = id
		a.statusTask(ctx, &v, id)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page loads nothing from anywhere: say so to the browser too.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'")
	if err := statusTmpl.Execute(w, &v); err != nil {
		a.log.Error("status page", "err", err)
	}
}

func (a *api) statusCluster(ctx context.Context, v *statusView) {
	cr, err := a.svc.Cluster(ctx)
	if err != nil {
		v.ClusterErr = CleanMessage(wire.ToError(err).Msg)
		return
	}
	v.ClusterID = cr.ClusterID
	v.Self = strconv.FormatUint(cr.Self, 10)
	addrOf := map[uint64]string{}
	alive := map[uint64]bool{}
	for _, m := range cr.Members {
		addrOf[m.ID] = m.Addr
		alive[m.ID] = m.State == "alive"
		v.Members = append(v.Members, memberRow{
			ID: strconv.FormatUint(m.ID, 10), Addr: m.Addr, State: m.State, Raft: m.Raft,
			Leader: m.ID == cr.Raft.Leader && cr.Raft.Leader != 0, Self: m.ID == cr.Self,
		})
		if m.ID == cr.Self {
			v.SelfAddr = m.Addr
		}
	}
	slices.SortFunc(v.Members, func(x, y memberRow) int { return strings.Compare(x.Addr, y.Addr) })
	name := func(id uint64) string {
		if id == 0 {
			return "none"
		}
		if a := addrOf[id]; a != "" {
			return a
		}
		return strconv.FormatUint(id, 10)
	}
	names := func(ids []uint64) string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = name(id)
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	v.Raft = raftRow{Leader: name(cr.Raft.Leader), Voters: names(cr.Raft.Voters), Learners: names(cr.Raft.Learners), Applied: cr.Raft.Applied}
	byLeader := map[uint64][]int{}
	widest := 0
	for _, p := range cr.Partitions {
		byLeader[p.Leader] = append(byLeader[p.Leader], p.Partition)
		widest = max(widest, len(p.Cohort))
	}
	var short []int
	for _, p := range cr.Partitions {
		if len(p.Cohort) < widest {
			short = append(short, p.Partition)
		}
	}
	v.Short = ranges(short)
	for leader, parts := range byLeader {
		v.Leaders = append(v.Leaders, leaderRow{Leader: name(leader), Count: len(parts), Partitions: ranges(parts), Down: leader == 0 || !alive[leader]})
	}
	slices.SortFunc(v.Leaders, func(x, y leaderRow) int { return strings.Compare(x.Leader, y.Leader) })
}

// ranges writes partition numbers as ranges: 0-3, 7, 9-10.
func ranges(ps []int) string {
	slices.Sort(ps)
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ps[i], ps[j])
		} else {
			fmt.Fprintf(&b, "%d", ps[i])
		}
		i = j + 1
	}
	return b.String()
}

func (a *api) statusQueues(ctx context.Context, v *statusView) {
	qs, err := a.svc.Queues(ctx, &wire.QueuesRequest{})
	if err != nil {
		v.QueuesErr = CleanMessage(wire.ToError(err).Msg)
		return
	}
	now := time.Now()
	a.statusState.mu.Lock()
	prev, since := a.statusState.prev, now.Sub(a.statusState.at)
	next := make(map[string]wire.QueueStats, len(qs.Queues))
	for _, q := range qs.Queues {
		next[q.Queue] = q
	}
	a.statusState.prev, a.statusState.at = next, now
	a.statusState.mu.Unlock()
	for _, q := range qs.Queues {
		row := queueRow{QueueStats: q}
		if p, ok := prev[q.Queue]; ok && since > 0 && since < rateWindow {
			row.HasRate = true
			secs := since.Seconds()
			// Tasks leave the counts only by garbage collection: a drop
			// is read as no enqueues, not negative ones.
			row.Enqueued = max(float64(total(q)-total(p)), 0) / secs
			row.Done = max(float64(q.Completed-p.Completed), 0) / secs
		}
		if q.OldestReadyAt > 0 {
			row.OldestAge = ago(q.OldestReadyAt)
		}
		v.Queues = append(v.Queues, row)
	}
}

// total is every task of a queue row.
func total(q wire.QueueStats) int64 {
	return q.Ready + q.Claimed + q.Delayed + q.Blocked + q.Completed + q.Dead + q.Cancelled
}

func (a *api) statusDead(ctx context.Context, v *statusView) {
	err := a.svc.List(ctx, &wire.ListRequest{State: "dead", Limit: statusDead, Desc: true}, func(p *wire.ListPage) error {
		for i := range p.Tasks {
			t := &p.Tasks[i]
			row := deadRow{ID: t.ID.String(), Queue: t.Queue, Attempts: t.Attempts}
			if n := len(t.Failures); n > 0 {
				f := t.Failures[n-1]
				row.Reason, row.At = f.Reason, atTime(f.At)
				if f.TimeLimit {
					row.Reason = "ran past its time limit"
				}
			}
			v.Dead = append(v.Dead, row)
		}
		return nil
	})
	if err != nil {
		v.DeadErr = CleanMessage(wire.ToError(err).Msg)
	}
}

func (a *api) statusTask(ctx context.Context, v *statusView, s string) {
	id, err := task.ParseID(s)
	if err != nil {
		v.TaskErr = CleanMessage(err.Error())
		return
	}
	tv, err := a.svc.Get(ctx, &wire.GetRequest{ID: id})
	if err != nil {
		v.TaskErr = CleanMessage(wire.ToError(err).Msg)
		return
	}
	d := &taskDetail{View: tv, Data: payloadText(tv.Data), Enqueued: atTime(tv.EnqueuedAt)}
	for _, c := range tv.Claims {
		row := claimRow{Claim: c.Claim, Start: atTime(c.Start), End: atTime(c.End)}
		if c.Completed != nil {
			row.Completed = atTime(*c.Completed)
		}
		d.Claims = append(d.Claims, row)
	}
	for _, f := range tv.Failures {
		d.Failures = append(d.Failures, failureRow{Claim: f.Claim, At: atTime(f.At), Reason: f.Reason, Snooze: f.Snooze})
	}
	v.Task = d
}

// atTime shows a Unix ms time in the node's local time ("" for none).
func atTime(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05")
}

// ago shows how long before now a Unix ms time was, coarsely.
func ago(ms int64) string {
	d := max(time.Since(time.UnixMilli(ms)), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// maxPayloadShown bounds a payload on the page.
const maxPayloadShown = 4096

// payloadText shows a payload as text when it is printable UTF-8, else
// as the count of its bytes.
func payloadText(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	s := string(b)
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) }) {
		return fmt.Sprintf("(%d bytes, not text)", len(b))
	}
	if len(s) > maxPayloadShown {
		s = s[:maxPayloadShown] + "…"
	}
	return s
}

// stateClass is the CSS class of a member's or task's state.
func stateClass(s string) string {
	switch s {
	case "alive", "ready", "completed":
		return "ok"
	case "suspect", "claimed", "delayed", "blocked":
		return "warn"
	case "dead", "left", "cancelled":
		return "bad"
	}
	return ""
}
