package buildinfo

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "v0.3.0", Revision: "abc", GoVersion: "go1.26.8"}, "v0.3.0 (revision abc, go1.26.8)"},
		{Info{Version: "(devel)", Revision: "abc", Modified: true, GoVersion: "go1.26.8"}, "(devel) (revision abc, modified, go1.26.8)"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%+v: %q; want %q", tc.in, got, tc.want)
		}
	}
	// A test binary records its Go release at least.
	if in := Read(); !strings.HasPrefix(in.GoVersion, "go") || in.Version == "" || in.Revision == "" {
		t.Errorf("Read() = %+v", in)
	}
}
