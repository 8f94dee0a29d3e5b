package faults

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// MonoNow reads CLOCK_MONOTONIC in nanoseconds. Go's own monotonic
// readings count from each process's start, so they cannot be compared
// across the harness and its worker processes; the kernel's clock is one
// timeline for every process on the machine, and SIGSTOP does not stop it.
func MonoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC exists on every Linux this runs on; without it
		// no event of the run could carry a time.
		panic(fmt.Sprintf("faults: clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}

// Timeline turns monotonic readings into the history's times: ns since
// the run began (Event.TNs). Every process of a run shares the start
// reading, so their events share one timeline.
type Timeline struct {
	// Start is the MonoNow reading when the run began.
	Start int64
}

// NewTimeline starts a timeline now.
func NewTimeline() Timeline { return Timeline{Start: MonoNow()} }

// Now returns ns since the run began.
func (t Timeline) Now() int64 { return MonoNow() - t.Start }
