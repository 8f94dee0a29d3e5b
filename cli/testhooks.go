package cli

import (
	"log/slog"

	"github.com/skuldd/skuldd/node"
)

// testHooks is set only in the test build (build tag skuldtest, see
// testhooks_skuldtest.go): it installs the fault suite's hooks into a
// node's config before the node is made and returns what binds them to
// the node once it exists. nil in production builds, which carry none of
// the hooks' code.
var testHooks func(cfg *node.Config, logger *slog.Logger) (bind func(*node.Node))
