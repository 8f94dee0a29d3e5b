package store

import (
	"math/rand/v2"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// MemFS is an in-memory filesystem that remembers what was synced, so it
// can be imaged as a power cut would leave it (CrashImage): the
// simulation's disks (package sim). An alias, so that packages above the
// store need not import Pebble.
type MemFS = vfs.MemFS

// NewMemFS returns an empty MemFS that can be crash-imaged.
func NewMemFS() *MemFS { return vfs.NewCrashableMem() }

// CrashImage returns a new MemFS holding what fs would hold after a power
// cut now: every file's and directory entry's synced state, and of what
// was written since its last sync, each piece with probability
// unsyncedPercent/100 (drawn from rng; nil when unsyncedPercent is 0), as
// a disk that wrote back part of its cache before the cut. fs itself is
// left as it is: the crashed process's last writes go there and are lost.
func CrashImage(fs *MemFS, unsyncedPercent int, rng *rand.Rand) *MemFS {
	return fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedPercent, RNG: rng})
}
