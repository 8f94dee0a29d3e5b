package faults

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func validConfig(t *testing.T, c Config) Config {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "skuldd")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	c.Out, c.Binary, c.Self = t.TempDir(), bin, bin
	return c
}

func TestConfigPresetsValidate(t *testing.T) {
	for name, c := range map[string]Config{"default": DefaultConfig(), "quick": QuickConfig()} {
		c := validConfig(t, c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestConfigValidateRejects(t *testing.T) {
	cases := map[string]func(*Config){
		"drift over bound":   func(c *Config) { c.MaxDrift = c.SkewBound },
		"within over bound":  func(c *Config) { c.MaxDrift = c.SkewBound * 9 / 10 },
		"quiet too short":    func(c *Config) { c.Quiet = c.TTL },
		"two nodes":          func(c *Config) { c.Topology.Nodes = 2 },
		"w over n":           func(c *Config) { c.W = 4 },
		"no binary":          func(c *Config) { c.Binary = filepath.Join(t.TempDir(), "missing") },
		"long without time":  func(c *Config) { c.Quick, c.Duration = false, 0 },
		"bad mix":            func(c *Config) { c.Mix.Fail = 2 },
		"negative warmup":    func(c *Config) { c.Warmup = -time.Second },
		"replicas over node": func(c *Config) { c.Replicas = 6 },
	}
	for name, mut := range cases {
		c := validConfig(t, QuickConfig())
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

// The network setup and teardown, for real: needs root and the ip tool,
// and FAULTS_NETNS_TEST=1, since it builds the same namespaces and bridge
// a run does (it would break a run going on at the same time).
func TestNetworkSetupTeardown(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it builds network namespaces (scripts/faults.sh runs the whole suite)")
	}
	if os.Getenv("FAULTS_NETNS_TEST") != "1" {
		t.Skip("set FAULTS_NETNS_TEST=1 to build the run's namespaces and bridge here (not while a run is going on)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip tool")
	}
	ctx := context.Background()
	topo := Topology{Nodes: 3, Bridge: DefaultBridge, Port: DefaultPort}
	if err := topo.SetupNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	defer topo.TeardownNetwork(ctx)
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if !strings.Contains(string(out), topo.NS(i)) {
			t.Errorf("namespace %s missing from %q", topo.NS(i), out)
		}
	}
	// Setup is idempotent: a second one first removes the first.
	if err := topo.SetupNetwork(ctx); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	topo.TeardownNetwork(ctx)
	out, _ = exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), "sk1") {
		t.Errorf("namespaces left after teardown: %q", out)
	}
	if err := exec.Command("ip", "link", "show", DefaultBridge).Run(); err == nil {
		t.Errorf("bridge %s left after teardown", DefaultBridge)
	}
}
