package member

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// MaxAckPayloadSize bounds what Config.AckPayload may attach to an ack, so
// acks stay well inside one packet.
const MaxAckPayloadSize = 256

// delegate receives memberlist's callbacks for a Member. It is a separate
// type so that the callback methods are not part of Member's API.
//
// memberlist calls NotifyJoin, NotifyLeave, NotifyUpdate, NotifyAlive and
// NotifyConflict with its node lock held: they must not call into
// memberlist, and they only take Member.mu briefly.
type delegate struct {
	m *Member
}

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
	_ memberlist.PingDelegate     = (*delegate)(nil)
)

// NodeMeta returns this node's metadata envelope.
func (d *delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	b := encodeMeta(d.m.mu.meta, d.m.mu.leaving)
	d.m.mu.Unlock()
	if len(b) > limit {
		// Unreachable: Config and SetMeta enforce MaxMetaSize. memberlist
		// panics on oversized meta, so degrade instead.
		d.m.log.Error("node meta over memberlist's limit, sending none", "len", len(b), "limit", limit)
		return encodeMeta(nil, false)
	}
	return b
}

// NotifyMsg ignores user messages: member sends none.
func (d *delegate) NotifyMsg([]byte) {}

// GetBroadcasts has nothing to piggyback.
func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState adds nothing to push/pull exchanges.
func (d *delegate) LocalState(bool) []byte { return nil }

// MergeRemoteState ignores what peers add to push/pull exchanges.
func (d *delegate) MergeRemoteState([]byte, bool) {}

// NotifyJoin: a node became alive (new, or back from dead or left).
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.m.observe(n, true) }

// NotifyUpdate: an alive node changed its metadata.
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.m.observe(n, true) }

// NotifyLeave: a node is dead or left; its metadata tells which.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.m.observe(n, false) }

// NotifyAlive refuses alive messages for nodes whose name is not an ID, so
// they never enter memberlist's table (nor, through it, ours).
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if _, err := parseNodeName(n.Name); err != nil {
		return err
	}
	return nil
}

// NotifyConflict: two nodes claim one ID at different addresses. That is
// an operator error (a copied data dir, or two nodes given one ID).
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.m.log.Warn("two nodes claim the same node id",
		"name", existing.Name, "known_addr", existing.Address(), "other_addr", other.Address())
}

// AckPayload returns Config.AckPayload's bytes, if any and small enough.
func (d *delegate) AckPayload() []byte {
	if d.m.ackPayload == nil {
		return nil
	}
	b := d.m.ackPayload()
	if len(b) > MaxAckPayloadSize {
		d.m.log.Debug("ack payload too large, sending none", "len", len(b), "limit", MaxAckPayloadSize)
		return nil
	}
	return b
}

// NotifyPingComplete passes a completed direct probe to Config.OnPing.
func (d *delegate) NotifyPingComplete(n *memberlist.Node, rtt time.Duration, payload []byte) {
	if d.m.onPing == nil {
		return
	}
	id, err := parseNodeName(n.Name)
	if err != nil {
		return
	}
	d.m.onPing(id, rtt, bytes.Clone(payload))
}

// logWriter turns memberlist's log lines ("[LEVEL] memberlist: text") into
// slog records at debug level, keeping memberlist's own level as an
// attribute: memberlist logs routine network trouble as [ERR], which is not
// an error of this node.
type logWriter struct {
	log *slog.Logger
}

func (w logWriter) Write(p []byte) (int, error) {
	if !w.log.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	msg := strings.TrimSpace(string(p))
	level := ""
	if strings.HasPrefix(msg, "[") {
		if i := strings.IndexByte(msg, ']'); i > 0 {
			level, msg = msg[1:i], strings.TrimSpace(msg[i+1:])
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	w.log.Debug(msg, "lib", "memberlist", "lib_level", level)
	return len(p), nil
}
