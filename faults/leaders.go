package faults

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Leaderships from the nodes' logs (leaders.jsonl, Leadership): skuldd
// logs a line at Info when a handoff makes the node a partition's leader
// (node/control/lead.go), through slog's text handler (the default
// --log-format):
//
//	time=2026-05-09T07:30:00.123+00:00 level=INFO msg=leading partition=3 epoch=12 sealed=false
//
// The time is the machine's wall clock (slog reads time.Now; a node's test
// clock offset does not reach it), so RunInfo.StartUnixNs maps it to the
// run's timeline.

// leadingMsg is the message of a leadership line.
const leadingMsg = "leading"

// ParseLeading reads one log line of node: the Leadership it records and
// true, or false if it is not a leadership line. TNs is the line's time
// less startUnixNs, or 0 if the time does not parse or startUnixNs is 0.
func ParseLeading(line string, node int, startUnixNs int64) (Leadership, bool) {
	fields := textFields(line)
	if fields["msg"] != leadingMsg {
		return Leadership{}, false
	}
	part, err1 := strconv.Atoi(fields["partition"])
	epoch, err2 := strconv.ParseUint(fields["epoch"], 10, 64)
	if err1 != nil || err2 != nil || part < 0 {
		return Leadership{}, false
	}
	l := Leadership{Node: node, Partition: part, Epoch: epoch}
	if t, err := time.Parse(time.RFC3339Nano, fields["time"]); err == nil && startUnixNs != 0 {
		l.TNs = max(t.UnixNano()-startUnixNs, 0)
	}
	return l, true
}

// textFields splits a slog text line into its key=value pairs. Values
// slog quotes ("a b") are read back up to the closing quote; a key given
// twice keeps its first value (the record's own time, level and msg come
// first). Only what ParseLeading needs: it does not unescape.
func textFields(line string) map[string]string {
	out := map[string]string{}
	for s := line; s != ""; {
		s = strings.TrimLeft(s, " ")
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			break
		}
		key, rest := s[:eq], s[eq+1:]
		if strings.ContainsAny(key, " \"") {
			break // not a key=value line
		}
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := closingQuote(rest)
			val, s = strings.Trim(rest[:end], `"`), rest[end:]
		} else {
			end := strings.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			val, s = rest[:end], rest[end:]
		}
		if _, dup := out[key]; !dup {
			out[key] = val
		}
	}
	return out
}

// closingQuote returns the index just past the quoted string that q
// starts with (len(q) if it is not closed).
func closingQuote(q string) int {
	for i := 1; i < len(q); i++ {
		switch q[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(q)
}

// ScanLeaders reads every leadership line of node's log at path.
func ScanLeaders(path string, node int, startUnixNs int64) ([]Leadership, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("leaders: %w", err)
	}
	defer f.Close()
	var out []Leadership
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, lineBufSize), maxLine)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "msg="+leadingMsg) {
			continue // cheap: most lines are not
		}
		if l, ok := ParseLeading(sc.Text(), node, startUnixNs); ok {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("leaders: read %s: %w", path, err)
	}
	return out, nil
}

// writeLeaders writes leaders.jsonl from every node's log, in node order
// and log order within a node, and returns how many records it wrote.
func (r *Run) writeLeaders() (int, error) {
	w, err := CreateJSONL(filepath.Join(r.cfg.Out, LeadersFile))
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, node := range r.nodes {
		ls, err := ScanLeaders(node.LogPath, node.Index, r.startUnixNs)
		if err != nil {
			errs = append(errs, err)
		}
		for _, l := range ls {
			w.Write(&l)
			n++
		}
	}
	if err := w.Close(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("leaders.jsonl: %w", errors.Join(errs...))
	}
	return n, nil
}
