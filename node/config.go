package node

import "github.com/skuldd/skuldd/node/config"

// Config configures a Node: node/config's, where each field is documented.
type Config = config.Config

// DefaultConfig returns the defaults (config.Default).
func DefaultConfig() Config { return config.Default() }
