package cli

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// ctlArgs moves ctl's flags given after a subcommand in front of it and a
// subcommand's flags given after its arguments before them; it leaves a
// command line already in that order, what follows "--", a subcommand's
// own flag of ctl's name, and words it does not know where they are.
func TestCtlArgs(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, tc := range []struct{ in, want string }{
		{"ctl --addr a count", "ctl --addr a count"},
		{"ctl count --addr a", "ctl --addr a count"},
		{"ctl count --addr=a --queue q", "ctl --addr=a count --queue q"},
		{"ctl enqueue --queue q -o table --timeout 5s", "ctl -o table --timeout 5s enqueue --queue q"},
		{"ctl enqueue --hint --addr a", "ctl --addr a enqueue --hint"},
		{"ctl enqueue --priority -1 --addr a", "ctl --addr a enqueue --priority -1"},
		{"ctl schedule set tick --queue q --every 1m --addr a", "ctl --addr a schedule set --queue q --every 1m tick"},
		{"ctl schedule delete list --addr a", "ctl --addr a schedule delete list"},
		{"ctl shards join w --ttl 5s -- sh -c 'x --addr y'", "ctl shards join --ttl 5s w -- sh -c 'x --addr y'"},
		{"ctl work --queue q --addr a -- ./handle --addr b", "ctl --addr a work --queue q -- ./handle --addr b"},
		{"ctl token --cluster-secret-file f --raw", "ctl token --cluster-secret-file f --raw"},
		{"ctl count --cluster-secret-file f", "ctl --cluster-secret-file f count"},
		{"ctl count --bogus x", "ctl count --bogus x"},
		{"ctl enqueue --data-file - --addr a", "ctl --addr a enqueue --data-file -"},
		{"bench --addr a", "bench --addr a"},
		{"--bind x", "--bind x"},
	} {
		got := ctlArgs(app, append([]string{"skuldd"}, strings.Fields(tc.in)...))
		if want := append([]string{"skuldd"}, strings.Fields(tc.want)...); !slices.Equal(got, want) {
			t.Errorf("ctlArgs(%s) = %q; want %q", tc.in, got[1:], want[1:])
		}
	}
}
