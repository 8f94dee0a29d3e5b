package raftgroup

import (
	"context"
	"fmt"
	"log/slog"

	"go.etcd.io/raft/v3"
)

// raftLogger adapts slog to raft.Logger. raft's own Fatal exits the
// process; here Fatal and Panic log and then panic, which crashes the node
// the same way but lets a test see the message.
type raftLogger struct{ l *slog.Logger }

var _ raft.Logger = raftLogger{}

// log and logf format only what the handler will keep: raft logs at debug
// level on every message.
func (r raftLogger) log(level slog.Level, v []any) {
	if !r.l.Enabled(context.Background(), level) {
		return
	}
	r.l.Log(context.Background(), level, fmt.Sprint(v...))
}

func (r raftLogger) logf(level slog.Level, format string, v []any) {
	if !r.l.Enabled(context.Background(), level) {
		return
	}
	r.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (r raftLogger) Debug(v ...any)                 { r.log(slog.LevelDebug, v) }
func (r raftLogger) Debugf(format string, v ...any) { r.logf(slog.LevelDebug, format, v) }

// raft's info lines narrate every election step; the group logs leader
// changes itself, so raft's info goes to debug.
func (r raftLogger) Info(v ...any)                    { r.log(slog.LevelDebug, v) }
func (r raftLogger) Infof(format string, v ...any)    { r.logf(slog.LevelDebug, format, v) }
func (r raftLogger) Warning(v ...any)                 { r.log(slog.LevelWarn, v) }
func (r raftLogger) Warningf(format string, v ...any) { r.logf(slog.LevelWarn, format, v) }
func (r raftLogger) Error(v ...any)                   { r.log(slog.LevelError, v) }
func (r raftLogger) Errorf(format string, v ...any)   { r.logf(slog.LevelError, format, v) }
func (r raftLogger) Fatal(v ...any)                   { r.fail(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(format string, v ...any)   { r.fail(fmt.Sprintf(format, v...)) }
func (r raftLogger) Panic(v ...any)                   { r.fail(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...any)   { r.fail(fmt.Sprintf(format, v...)) }

func (r raftLogger) fail(msg string) {
	r.l.Error(msg)
	panic("raft: " + msg)
}
