package version

import (
	"errors"
	"strings"
	"testing"
)

func TestFeatureCheck(t *testing.T) {
	if Of(0) != Base || Of(2) != 2 {
		t.Fatalf("Of(0) = %d, Of(2) = %d", Of(0), Of(2))
	}
	if Max < Removal {
		t.Fatalf("Max %d is below a version this build names (%d)", Max, Removal)
	}
	if err := MemberRemoval.Check(Removal); err != nil {
		t.Fatal(err)
	}
	err := MemberRemoval.Check(Base)
	var ny *NotYetError
	if !errors.As(err, &ny) || ny.Cluster != Base || ny.Feature != MemberRemoval {
		t.Fatalf("Check(Base) = %v", err)
	}
	for _, want := range []string{"runs cluster version 1", "removing a node", "cluster version 2 adds it", "ctl upgrade status"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
