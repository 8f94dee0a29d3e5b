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

// TestREADMEWorker: README's Go worker is Example_worker's code, which
// go test runs.
func TestREADMEWorker(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "\t// README:begin\n")
	example, _, found := strings.Cut(rest, "\t// README:end\n")
	if !found {
		t.Fatal("no README markers in example_test.go")
	}
	// README's block is the example one tab to the left.
	want := strings.ReplaceAll("\n"+example, "\n\t", "\n")
	if !strings.Contains(string(readme), want) {
		t.Fatalf("README.md does not show Example_worker's code; want it to contain:%s", want)
	}
}
