package antientropy

import (
	"errors"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	def := DefaultConfig()
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"default", func(*Config) {}, true},
		{"local", func(c *Config) { *c = DefaultLocalConfig() }, true},
		{"smallest", func(c *Config) { c.Shape = Shape{Buckets: BucketsMin, Fanout: FanoutMin} }, true},
		{"largest", func(c *Config) { c.Shape = Shape{Buckets: BucketsMax, Fanout: FanoutMax} }, true},
		{"ragged root", func(c *Config) { c.Shape = Shape{Buckets: 2048, Fanout: 32} }, true},
		{"zero", func(c *Config) { *c = Config{} }, false},
		{"buckets not a power of two", func(c *Config) { c.Shape.Buckets = 1000 }, false},
		{"too many buckets", func(c *Config) { c.Shape.Buckets = 2 * BucketsMax }, false},
		{"one bucket", func(c *Config) { c.Shape = Shape{Buckets: 1, Fanout: 2} }, false},
		{"fanout not a power of two", func(c *Config) { c.Shape.Fanout = 24 }, false},
		{"fanout one", func(c *Config) { c.Shape.Fanout = 1 }, false},
		{"fanout too large", func(c *Config) { c.Shape = Shape{Buckets: 4096, Fanout: 2 * FanoutMax} }, false},
		{"fanout above buckets", func(c *Config) { c.Shape = Shape{Buckets: 16, Fanout: 32} }, false},
		{"no buckets per round", func(c *Config) { c.Limits.BucketsPerRound = 0 }, false},
		{"too many buckets per round", func(c *Config) { c.Limits.BucketsPerRound = BucketsMax + 1 }, false},
		{"no ids per round", func(c *Config) { c.Limits.IDsPerRound = 0 }, false},
		{"too many ids per round", func(c *Config) { c.Limits.IDsPerRound = IDsPerRoundMax + 1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := def
			tc.mod(&c)
			err := c.Validate()
			if tc.ok != (err == nil) {
				t.Fatalf("Validate(%+v) = %v; want ok %v", c, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate(%+v) = %v; want an ErrConfig", c, err)
			}
			if _, err := NewTree(c.Shape); (err == nil) != (c.Shape.Validate() == nil) {
				t.Fatalf("NewTree(%+v) = %v; want it to agree with Shape.Validate", c.Shape, err)
			}
		})
	}
}

func TestShapeLevels(t *testing.T) {
	tests := []struct {
		shape  Shape
		widths []int // per level, root first
	}{
		{Shape{Buckets: 1024, Fanout: 32}, []int{1, 32, 1024}},
		{Shape{Buckets: 2048, Fanout: 32}, []int{1, 2, 64, 2048}},
		{Shape{Buckets: 64, Fanout: 8}, []int{1, 8, 64}},
		{Shape{Buckets: 2, Fanout: 2}, []int{1, 2}},
		{Shape{Buckets: 8, Fanout: 2}, []int{1, 2, 4, 8}},
		{Shape{Buckets: 32, Fanout: 32}, []int{1, 32}},
	}
	for _, tc := range tests {
		if got := tc.shape.Depth(); got != len(tc.widths)-1 {
			t.Errorf("%+v: Depth() = %d; want %d", tc.shape, got, len(tc.widths)-1)
			continue
		}
		for l, w := range tc.widths {
			if got := tc.shape.Width(l); got != w {
				t.Errorf("%+v: Width(%d) = %d; want %d", tc.shape, l, got, w)
			}
		}
	}
}
