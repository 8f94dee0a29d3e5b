package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"
)

// systemd's notify protocol (Type=notify): the service manager passes a
// datagram socket in $NOTIFY_SOCKET, and the service writes its state to
// it: READY=1 once it serves, STATUS=... for `systemctl status`,
// STOPPING=1 when it begins to shut down. Without the variable (not run
// by systemd, or Type=simple) nothing is sent.

// notifySocketEnv names the variable systemd passes the socket in.
const notifySocketEnv = "NOTIFY_SOCKET"

// readyPoll is how often a starting node's readiness is read until it is
// ready, for READY=1 and the STATUS line meanwhile.
const readyPoll = 200 * time.Millisecond

// sdNotify sends state to the notify socket, if there is one.
func sdNotify(state string) error {
	path := os.Getenv(notifySocketEnv)
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("systemd notify socket: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("systemd notify socket: %w", err)
	}
	return nil
}

// notifyReady sends READY=1 once readiness finds nothing wrong (what GET
// /readyz reports), and meanwhile STATUS lines with its reasons, each
// time they change; it gives up when ctx ends. It does nothing unless
// systemd asked for notifications.
func notifyReady(ctx context.Context, readiness func() []string, log *slog.Logger) {
	if os.Getenv(notifySocketEnv) == "" {
		return
	}
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	last := ""
	for {
		reasons := readiness()
		if len(reasons) == 0 {
			if err := sdNotify("READY=1\nSTATUS=ready"); err != nil {
				log.Warn("cannot tell systemd the node is ready", "err", err)
			}
			return
		}
		if status := "not ready: " + strings.Join(reasons, "; "); status != last {
			last = status
			if err := sdNotify("STATUS=" + status); err != nil {
				log.Warn("cannot tell systemd the node's status", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
