package member

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultLocalConfig()
		c.ID = 1
		c.Addr = "127.0.0.1:20001"
		c.Net = &countingNet{}
		return c
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"valid local", func(*Config) {}, ""},
		{"valid default timing", func(c *Config) {
			d := DefaultConfig()
			d.ID, d.Addr, d.Net = c.ID, c.Addr, c.Net
			*c = d
		}, ""},
		{"valid ipv6", func(c *Config) { c.Addr = "[::1]:20001" }, ""},
		{"valid max meta", func(c *Config) { c.Meta = make([]byte, MaxMetaSize) }, ""},
		{"zero id", func(c *Config) { c.ID = 0 }, "ID"},
		{"empty addr", func(c *Config) { c.Addr = "" }, "Addr"},
		{"wildcard ipv4", func(c *Config) { c.Addr = "0.0.0.0:20001" }, "wildcard"},
		{"wildcard ipv6", func(c *Config) { c.Addr = "[::]:20001" }, "wildcard"},
		{"host name", func(c *Config) { c.Addr = "localhost:20001" }, "literal"},
		{"no port", func(c *Config) { c.Addr = "127.0.0.1" }, "Addr"},
		{"port zero", func(c *Config) { c.Addr = "127.0.0.1:0" }, "port 0"},
		{"multicast", func(c *Config) { c.Addr = "224.0.0.1:20001" }, "multicast"},
		{"zone", func(c *Config) { c.Addr = "[fe80::1%eth0]:20001" }, "zone"},
		{"nil net", func(c *Config) { c.Net = nil }, "Net"},
		{"meta too long", func(c *Config) { c.Meta = make([]byte, MaxMetaSize+1) }, "Meta"},
		{"zero probe interval", func(c *Config) { c.ProbeInterval = 0 }, "ProbeInterval"},
		{"probe timeout not below interval", func(c *Config) { c.ProbeTimeout = c.ProbeInterval }, "ProbeTimeout"},
		{"zero push pull", func(c *Config) { c.PushPullInterval = 0 }, "PushPullInterval"},
		{"negative retention", func(c *Config) { c.DeadRetention = -time.Second }, "DeadRetention"},
		{"zero gossip nodes", func(c *Config) { c.GossipNodes = 0 }, "GossipNodes"},
		{"zero suspicion mult", func(c *Config) { c.SuspicionMult = 0 }, "SuspicionMult"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v; want nil", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil; want an error mentioning %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Validate() = %v; want it to mention %q", err, tc.wantErr)
			}
			if tc.wantErr == "" {
				return
			}
			// New refuses the same config, with the same error.
			if m, err := New(c); err == nil {
				_ = m.Shutdown()
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

// Validate reports all problems at once, so an operator fixes them in one
// go.
func TestConfigValidateReportsAll(t *testing.T) {
	var c Config
	err := c.Validate()
	if err == nil {
		t.Fatal("zero Config validated")
	}
	for _, want := range []string{"ID", "Addr", "Net", "ProbeInterval"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to mention %q", err, want)
		}
	}
}

// The address is canonicalized the way memberlist prints addresses, so
// that Members, Join and Net all agree on one spelling.
func TestAddrIsCanonical(t *testing.T) {
	n := newMemNet()
	cfg := testConfig(t, n, 1)
	cfg.Addr = "[::ffff:127.0.0.1]:20001"
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer func() { _ = m.Shutdown() }()
	if got := m.LocalAddr(); got != "127.0.0.1:20001" {
		t.Errorf("LocalAddr() = %q; want %q", got, "127.0.0.1:20001")
	}
	if got := m.Members()[0].Addr; got != "127.0.0.1:20001" {
		t.Errorf("Members()[0].Addr = %q; want %q", got, "127.0.0.1:20001")
	}
}
