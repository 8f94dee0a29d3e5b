package client_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/client"
	"github.com/skuldd/skuldd/node"
)

// exampleNode starts a one-node cluster on a free loopback port and
// returns its address and a stop.
func exampleNode() (nodes []string, stop func()) {
	dir, err := os.MkdirTemp("", "skuldd-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.Bind, cfg.DataDir, cfg.Partitions = "127.0.0.1:0", dir, 4
	cfg.GossipProfile = "local"
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := node.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	return []string{n.Addr()}, func() { _ = n.Close(); _ = os.RemoveAll(dir) }
}

// A worker serving two queues, the heavier picked ten times as often.
// README.md shows the code between the README markers (TestREADMEWorker
// holds them equal).
func Example_worker() {
	nodes, stopNode := exampleNode()
	defer stopNode()
	// README:begin
	c, err := client.New(client.Config{Nodes: nodes})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if _, err := c.Enqueue(ctx, client.Task{Queue: "emails", Data: []byte("ada@example.com")}); err != nil {
		log.Fatal(err)
	}
	w, err := c.NewWorker(client.WorkerConfig{
		Queues:      []client.Queue{{Name: "emails", Weight: 10}, {Name: "reports", Weight: 1}},
		Concurrency: 16,
		TimeLimit:   time.Minute,
	}, func(ctx context.Context, job *client.Job) error {
		fmt.Printf("mail to %s, claim %d\n", job.Data, job.Claim)
		stop()     // one task is enough here: Run drains and returns
		return nil // completes the task; an error fails the attempt, retried with backoff
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil { // until ctx ends; renews leases meanwhile
		log.Fatal(err)
	}
	// README:end

	// Output: mail to ada@example.com, claim 0
}

// README:begin
// Welcome is a kind's typed arguments: the payload, as JSON.
type Welcome struct {
	To string `json:"to"`
}

func (Welcome) Kind() string { return "welcome" }

// serveMail runs a worker that routes each task of queue mail to the
// handler of its kind, and logs every job.
func serveMail(ctx context.Context, c *client.Client) error {
	kinds := client.NewKinds()
	client.HandleKind(kinds, func(ctx context.Context, job *client.Job, w Welcome) error {
		fmt.Printf("welcome, %s\n", w.To)
		return nil
	})
	w, err := c.NewWorker(client.WorkerConfig{Queues: []client.Queue{{Name: "mail"}}}, kinds.Handler())
	if err != nil {
		return err
	}
	w.Use(func(next client.Handler) client.Handler {
		return func(ctx context.Context, job *client.Job) error {
			err := next(ctx, job)
			slog.Info("job done", "kind", job.Kind, "id", job.ID, "claim", job.Claim, "err", err)
			return err
		}
	})
	return w.Run(ctx)
}

// README:end

// Tasks routed by kind to typed handlers; README.md shows the code
// between the README markers above.
func Example_kinds() {
	nodes, stopNode := exampleNode()
	defer stopNode()
	c, err := client.New(client.Config{Nodes: nodes})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	enq, err := c.EnqueueKind(ctx, Welcome{To: "ada@example.com"}, client.Task{Queue: "mail"})
	if err != nil {
		log.Fatal(err)
	}
	go func() { // stop the worker once the task completed
		for ctx.Err() == nil {
			if info, err := c.Get(ctx, enq.ID); err == nil && info.State == "completed" {
				stop()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if err := serveMail(ctx, c); err != nil {
		log.Fatal(err)
	}

	// Output: welcome, ada@example.com
}

// TestREADMEExamples: each block of this file between README markers is
// in README.md, dedented by the markers' indentation (the examples are
// run by go test, so README's Go code compiles and does what it says).
func TestREADMEExamples(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	var indent string
	var block []string
	in := false
	for line := range strings.Lines(string(src)) {
		trimmed := strings.TrimLeft(line, "\t")
		switch {
		case trimmed == "// README:begin\n":
			in, indent, block = true, line[:len(line)-len(trimmed)], nil
		case trimmed == "// README:end\n" && in:
			in = false
			blocks++
			want := strings.Join(block, "")
			if !strings.Contains(string(readme), want) {
				t.Errorf("README.md does not show example block %d; want it to contain:\n%s", blocks, want)
			}
		case in:
			block = append(block, strings.TrimPrefix(line, indent))
		}
	}
	if blocks < 2 {
		t.Fatalf("%d README blocks in example_test.go; want the worker's and the kinds'", blocks)
	}
}
