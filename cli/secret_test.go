package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cluster secret file other users may read is refused, saying how to
// fix it; one only its owner reads is taken.
func TestReadSecretMode(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true}, {0o400, true}, {0o640, false}, {0o644, false}, {0o604, false}, {0o660, false},
	} {
		path := filepath.Join(dir, "secret-"+tc.mode.String())
		if err := os.WriteFile(path, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		b, err := readSecret(path)
		switch {
		case tc.ok && (err != nil || string(b) != "0123456789abcdef0123456789abcdef"):
			t.Errorf("mode %04o: %q, %v; want the secret", tc.mode, b, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "lets other users read it") || !strings.Contains(err.Error(), "chmod 600")):
			t.Errorf("mode %04o: %v; want it refused, saying how to fix it", tc.mode, err)
		}
	}
}
