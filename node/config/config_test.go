package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skuldd/skuldd/node/listen"
)

func TestDefaultConfigValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

// The node refuses to bind a non-loopback address without --insecure:
// nodes do not authenticate clients yet (issue: "It refuses to bind a
// non-loopback address unless --insecure is given").
func TestBindLoopbackOnly(t *testing.T) {
	tests := []struct {
		bind     string
		insecure bool
		wantErr  error // nil: valid
		wantAny  bool  // some other error
	}{
		{"127.0.0.1:13000", false, nil, false},
		{"127.0.0.2:0", false, nil, false},
		{"[::1]:13000", false, nil, false},
		{"localhost:13000", false, nil, false},
		{"0.0.0.0:13000", false, listen.ErrInsecureBind, false},
		{"10.1.2.3:13000", false, listen.ErrInsecureBind, false},
		{"[::]:13000", false, listen.ErrInsecureBind, false},
		{"0.0.0.0:13000", true, nil, false},
		{"example.com:13000", false, nil, true},
		{"no-port", false, nil, true},
	}
	for _, tc := range tests {
		c := Default()
		c.Bind, c.Insecure = tc.bind, tc.insecure
		err := c.Validate()
		switch {
		case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
			t.Errorf("bind %s insecure=%v: err %v; want %v", tc.bind, tc.insecure, err, tc.wantErr)
		case tc.wantAny && err == nil:
			t.Errorf("bind %s: accepted; want an error", tc.bind)
		case tc.wantErr == nil && !tc.wantAny && err != nil:
			t.Errorf("bind %s insecure=%v: %v; want valid", tc.bind, tc.insecure, err)
		}
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	c := Default()
	c.Partitions = 0
	c.DefaultTTL = 2 * c.MaxTTL
	c.TickInterval = 0
	c.WALMinSyncInterval = -time.Millisecond
	err := c.Validate()
	for _, want := range []string{"partitions 0", "default ttl", "tick interval", "WAL min sync interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to mention %q", err, want)
		}
	}
	c = Default()
	c.ElectionBackoffMax = time.Millisecond
	if err := c.Validate(); err == nil {
		t.Error("election backoff max below base accepted")
	}
}
