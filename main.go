// Command skuldd is a distributed task queue in one binary: `skuldd` runs a
// node, `skuldd ctl` talks to one, `skuldd bench` load-tests one.
package main

import (
	"context"
	"os"

	"github.com/skuldd/skuldd/cli"
)

func main() {
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr))
}
