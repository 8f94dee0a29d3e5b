package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
)

type sendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (sendEmail) Kind() string { return "email.send" }

type resize struct {
	Width int `json:"width"`
}

func (resize) Kind() string { return "image.resize" }

type runKey struct{}

// TestKindsRouteAndMiddleware: tasks reach the handler of their kind
// with typed args; an unknown kind fails its attempt with ErrUnknownKind
// (dead at its max attempts), a payload that does not decode fails for
// good; middleware wraps every job, the first added outermost, and the
// handler's context carries Run's values.
func TestKindsRouteAndMiddleware(t *testing.T) {
	_, c := oneNode(t)
	ctx := t.Context()
	mail, err := c.EnqueueKind(ctx, sendEmail{To: "ada@example.com", Subject: "hi"}, client.Task{Queue: "k"})
	if err != nil {
		t.Fatal(err)
	}
	img, err := c.EnqueueKind(ctx, resize{Width: 640}, client.Task{Queue: "k"})
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := c.Enqueue(ctx, client.Task{Queue: "k", Kind: "video.encode", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	garbled, err := c.Enqueue(ctx, client.Task{Queue: "k", Kind: "email.send", Data: []byte("not json"), MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueKind(ctx, resize{}, client.Task{Queue: "k", Kind: "other"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("EnqueueKind with a kind of its own: %v; want ErrInvalid", err)
	}

	var mu sync.Mutex
	var got []string
	note := func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }
	kinds := client.NewKinds()
	client.HandleKind(kinds, func(ctx context.Context, j *client.Job, a sendEmail) error {
		note("mail to " + a.To + ": " + a.Subject + ", run value " + ctx.Value(runKey{}).(string))
		return nil
	})
	client.HandleKind(kinds, func(_ context.Context, j *client.Job, a resize) error {
		if a.Width != 640 {
			t.Errorf("resize width %d; want 640", a.Width)
		}
		note("resize")
		return nil
	})
	w, err := c.NewWorker(client.WorkerConfig{Queues: []client.Queue{{Name: "k"}}, Concurrency: 1, PollWait: 50 * time.Millisecond,
		Backoff: client.Backoff{Base: time.Millisecond}}, kinds.Handler())
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var omu sync.Mutex
	mw := func(name string) client.Middleware {
		return func(next client.Handler) client.Handler {
			return func(ctx context.Context, j *client.Job) error {
				omu.Lock()
				order = append(order, name+">"+j.Kind)
				omu.Unlock()
				return next(ctx, j)
			}
		}
	}
	w.Use(mw("outer"))
	w.Use(mw("inner"))
	runCtx, stop := context.WithCancel(context.WithValue(ctx, runKey{}, "from Run"))
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()

	awaitState(t, c, []client.ID{mail.ID, img.ID}, "completed")
	dead := awaitState(t, c, []client.ID{unknown.ID, garbled.ID}, "dead")
	if f := dead[0].Failures; dead[0].Attempts != 2 || len(f) != 2 || f[0].NoRetry || !strings.Contains(f[0].Reason, `no handler for the task's kind "video.encode"`) {
		t.Fatalf("unknown kind: attempts %d, failures %+v; want 2 failed attempts naming the kind", dead[0].Attempts, f)
	}
	if f := dead[1].Failures; dead[1].Attempts != 1 || len(f) != 1 || !f[0].NoRetry || !strings.Contains(f[0].Reason, "does not decode") {
		t.Fatalf("garbled payload: attempts %d, failures %+v; want one no-retry failure", dead[1].Attempts, f)
	}
	mu.Lock()
	defer mu.Unlock()
	if !containsAll(got, "mail to ada@example.com: hi, run value from Run", "resize") {
		t.Fatalf("handlers ran %q", got)
	}
	omu.Lock()
	defer omu.Unlock()
	if len(order) < 8 || len(order)%2 != 0 {
		t.Fatalf("middleware ran %d times: %q; want twice for each of at least 4 jobs", len(order), order)
	}
	for i := 0; i < len(order); i += 2 {
		if !strings.HasPrefix(order[i], "outer>") || order[i+1] != "inner>"+strings.TrimPrefix(order[i], "outer>") {
			t.Fatalf("middleware order %q; want outer, then inner, for each job", order)
		}
	}
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
