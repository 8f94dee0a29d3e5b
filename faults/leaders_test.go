package faults

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// ParseLeading reads the line skuldd's text handler writes when a node
// becomes a partition's leader, and nothing else; its time maps to the
// run's timeline through StartUnixNs.
func TestParseLeading(t *testing.T) {
	start := time.Date(2026, 5, 9, 7, 30, 0, 0, time.UTC).UnixNano()
	cases := []struct {
		name  string
		line  string
		start int64
		want  Leadership
		ok    bool
	}{
		{"slog text line, 1.5 s into the run",
			"time=2026-05-09T07:30:01.500Z level=INFO msg=leading partition=3 epoch=12 sealed=false",
			start, Leadership{Node: 2, Partition: 3, Epoch: 12, TNs: 1_500_000_000}, true},
		{"another zone, attributes before the pair",
			"time=2026-05-09T09:30:02.250+02:00 level=INFO msg=leading node=ab12 partition=0 epoch=1 sealed=true",
			start, Leadership{Node: 2, Partition: 0, Epoch: 1, TNs: 2_250_000_000}, true},
		{"no start time: TNs unknown",
			"time=2026-05-09T07:30:01.500Z level=INFO msg=leading partition=3 epoch=12 sealed=false",
			0, Leadership{Node: 2, Partition: 3, Epoch: 12}, true},
		{"time that does not parse: TNs unknown",
			"time=yesterday level=INFO msg=leading partition=15 epoch=18446744073709551615",
			start, Leadership{Node: 2, Partition: 15, Epoch: 18446744073709551615}, true},
		{"before the run: clamped to 0",
			"time=2026-05-09T07:29:59Z level=INFO msg=leading partition=1 epoch=2",
			start, Leadership{Node: 2, Partition: 1, Epoch: 2}, true},
		{"a quoted value before the pair",
			`time=2026-05-09T07:30:01Z level=INFO msg=leading why="a b=c" partition=4 epoch=5`,
			start, Leadership{Node: 2, Partition: 4, Epoch: 5, TNs: 1_000_000_000}, true},
		{"another message", "time=2026-05-09T07:30:01Z level=WARN msg=\"partition handoff failed; retrying\" partition=3 attempt=2", start, Leadership{}, false},
		{"a message that starts like it", "time=2026-05-09T07:30:01Z level=INFO msg=leadingX partition=3 epoch=4", start, Leadership{}, false},
		{"the words in a quoted message", `time=2026-05-09T07:30:01Z level=INFO msg="stopped leading" partition=3 epoch=4`, start, Leadership{}, false},
		{"no epoch", "time=2026-05-09T07:30:01Z level=INFO msg=leading partition=3", start, Leadership{}, false},
		{"a harness marker", "=== faults: start 2 of node 2 at t=9.000s ===", start, Leadership{}, false},
		{"a panic", "panic: msg=leading partition=3 epoch=4", start, Leadership{}, false},
	}
	for _, c := range cases {
		got, ok := ParseLeading(c.line, 2, c.start)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// writeLeaders writes one record per leadership line of every node's
// log, with the node's index, whatever incarnation of it logged it.
func TestWriteLeaders(t *testing.T) {
	out := t.TempDir()
	start := time.Date(2026, 5, 9, 7, 30, 0, 0, time.UTC).UnixNano()
	logs := map[int]string{
		1: "=== faults: start 1 of node 1 at t=0.100s ===\n" +
			"time=2026-05-09T07:30:01Z level=INFO msg=leading partition=0 epoch=1 sealed=false\n" +
			"time=2026-05-09T07:30:02Z level=ERROR msg=\"replication failed\" partition=0\n" +
			"=== faults: start 2 of node 1 at t=9.000s ===\n" +
			"time=2026-05-09T07:30:10Z level=INFO msg=leading partition=2 epoch=7 sealed=true\n",
		2: "time=2026-05-09T07:30:03Z level=INFO msg=started\n",
	}
	r := &Run{cfg: Config{Out: out}, startUnixNs: start}
	for i := 1; i <= 3; i++ { // node 3 has no log at all
		path := filepath.Join(out, "n"+string(rune('0'+i))+".log")
		if l, ok := logs[i]; ok {
			if err := os.WriteFile(path, []byte(l), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r.nodes = append(r.nodes, &NodeProc{Index: i, LogPath: path})
	}
	n, err := r.writeLeaders()
	if err == nil {
		t.Errorf("no error for node 3's missing log")
	}
	want := []Leadership{
		{Node: 1, Partition: 0, Epoch: 1, TNs: 1e9},
		{Node: 1, Partition: 2, Epoch: 7, TNs: 10e9},
	}
	if n != len(want) {
		t.Errorf("wrote %d; want %d", n, len(want))
	}
	f, err := os.Open(filepath.Join(out, LeadersFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Leadership
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var l Leadership
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		got = append(got, l)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("leaders.jsonl %+v; want %+v", got, want)
	}
}
