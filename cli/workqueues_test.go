package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/skuldd/skuldd/client"
)

// TestWorkQueues: --queue is NAME or NAME=WEIGHT; every valid queue name
// can be served, ':' included, and a value that could be read either as
// a name or as the old NAME:WEIGHT is refused, naming both spellings.
func TestWorkQueues(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want []client.Queue
		err  string // a substring of the error; "" for none
	}{
		{vals: []string{"mail"}, want: []client.Queue{{Name: "mail", Weight: 1}}},
		{vals: []string{"greet=10", "chores"}, want: []client.Queue{{Name: "greet", Weight: 10}, {Name: "chores", Weight: 1}}},
		// ':' is a queue name character.
		{vals: []string{"products:eu"}, want: []client.Queue{{Name: "products:eu", Weight: 1}}},
		{vals: []string{"products:eu=3"}, want: []client.Queue{{Name: "products:eu", Weight: 3}}},
		{vals: []string{"a:b:c", "x:"}, want: []client.Queue{{Name: "a:b:c", Weight: 1}, {Name: "x:", Weight: 1}}},
		{vals: []string{"v1.2_x-y:z"}, want: []client.Queue{{Name: "v1.2_x-y:z", Weight: 1}}},
		{vals: []string{"a:1x", "a:-1"}, want: []client.Queue{{Name: "a:1x", Weight: 1}, {Name: "a:-1", Weight: 1}}},
		{vals: []string{":5"}, want: []client.Queue{{Name: ":5", Weight: 1}}}, // never a weight: no name before it
		// A name ending in ':' and digits is served with an explicit weight.
		{vals: []string{"a:1=1"}, want: []client.Queue{{Name: "a:1", Weight: 1}}},
		{vals: []string{"shard:7=2", "shard=7"}, want: []client.Queue{{Name: "shard:7", Weight: 2}, {Name: "shard", Weight: 7}}},
		{vals: []string{strings.Repeat("q", 128) + "=4"}, want: []client.Queue{{Name: strings.Repeat("q", 128), Weight: 4}}},
		// Ambiguous without '=': the old NAME:WEIGHT or a queue so named.
		{vals: []string{"greet:10"}, err: `"greet:10" is ambiguous: ':' belongs to queue names, so give a weight after '=': --queue greet=10 serves queue "greet" with weight 10, --queue greet:10=1 serves the queue named "greet:10"`},
		{vals: []string{"mail", "a:b:3"}, err: `--queue a:b=3 serves queue "a:b" with weight 3, --queue a:b:3=1`},
		// Bad weights and names.
		{vals: []string{"q="}, err: "the weight after '=' must be a positive integer"},
		{vals: []string{"q=0"}, err: "the weight after '=' must be a positive integer"},
		{vals: []string{"q=-2"}, err: "the weight after '=' must be a positive integer"},
		{vals: []string{"q=x"}, err: "the weight after '=' must be a positive integer"},
		{vals: []string{"q=1=2"}, err: "the weight after '=' must be a positive integer"},
		{vals: []string{"=3"}, err: "queue name is empty"},
		{vals: []string{""}, err: "queue name is empty"},
		{vals: []string{"bad queue"}, err: "allowed: A-Z a-z 0-9 . _ : -"},
		{vals: []string{strings.Repeat("q", 129)}, err: "limit 128"},
		{vals: nil, err: "missing --queue"},
	} {
		got, err := workQueues(tc.vals)
		if tc.err != "" {
			var ue usageError
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &ue) {
				t.Errorf("workQueues(%q) = %v, %v; want a usage error with %q", tc.vals, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("workQueues(%q) = %v, %v; want %v", tc.vals, got, err, tc.want)
		}
	}
}
