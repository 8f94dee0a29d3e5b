package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/skuldd/skuldd/internal/buildinfo"
	"github.com/skuldd/skuldd/task"
)

// Reference: store/layout.go.

func openLayoutStore(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open(Config{Dir: "/db", FS: fs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func layoutSpec(id task.ID, payload int) *task.Spec {
	return &task.Spec{
		ID: id, Queue: "q", Priority: 3, Group: "g", MaxAttempts: 2, EnqueuedAt: 1_700_000_000_000,
		Data: bytes.Repeat([]byte{0xab}, payload),
	}
}

// rawValue returns the value under key, or nil if there is none.
func rawValue(t *testing.T, s *Store, key []byte) []byte {
	t.Helper()
	v, err := s.get(key)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %x: %v", key, err)
	}
	return v
}

// checkTask checks every read of task sp of partition part against sp,
// and that its records are those of layout 2.
func checkTask(t *testing.T, s *Store, part uint16, sp *task.Spec) {
	t.Helper()
	apart := len(sp.Data) > inlinePayloadMax
	sv := rawValue(t, s, taskKey(kindSpec, part, sp.ID))
	dv := rawValue(t, s, taskKey(kindData, part, sp.ID))
	switch {
	case len(sv) == 0:
		t.Fatalf("task %s: no spec record", sp.ID)
	case apart && (sv[0] != specApart || dv == nil):
		t.Errorf("payload of %d bytes: spec mark %#x, data record %v; want apart with a data record", len(sp.Data), sv[0], dv != nil)
	case !apart && (sv[0] != specWhole || dv != nil):
		t.Errorf("payload of %d bytes: spec mark %#x, data record %v; want whole without a data record", len(sp.Data), sv[0], dv != nil)
	}

	meta := *sp
	meta.Data = nil
	if got, err := s.Spec(part, sp.ID); err != nil || !reflect.DeepEqual(*got, meta) {
		t.Errorf("Spec = %+v, %v; want %+v", got, err, meta)
	}
	before := s.Lookups()
	got, err := s.FullSpec(part, sp.ID)
	if err != nil || !reflect.DeepEqual(got, sp) && !(len(sp.Data) == 0 && reflect.DeepEqual(*got, meta)) {
		t.Fatalf("FullSpec = %+v, %v; want %+v", got, err, sp)
	}
	wantLookups := uint64(1)
	if apart {
		wantLookups = 2
	}
	if n := s.Lookups() - before; n != wantLookups {
		t.Errorf("payload of %d bytes: FullSpec took %d lookups; want %d", len(sp.Data), n, wantLookups)
	}

	found := false
	err = s.ScanPartition(part, sp.ID, func(r TaskRecord) (bool, error) {
		found = r.Spec.ID == sp.ID
		want := *sp // a small payload comes with its spec
		if apart {
			want = meta
		}
		if found && (r.PayloadApart != apart || !bytes.Equal(r.Spec.Data, want.Data) || r.Spec.Queue != want.Queue) {
			t.Errorf("ScanPartition: payload of %d bytes, apart %v; want %d bytes, apart %v", len(r.Spec.Data), r.PayloadApart, len(want.Data), apart)
		}
		return false, nil
	})
	if err != nil || !found {
		t.Errorf("ScanPartition: found %v, %v", found, err)
	}

	var exported *task.Spec
	if err := s.ExportPartition(part, sp.ID, func(r TaskExport) (bool, error) {
		exported = r.Spec
		return false, nil
	}); err != nil || exported == nil || !bytes.Equal(exported.Data, sp.Data) || exported.ID != sp.ID {
		t.Errorf("ExportPartition: %+v, %v; want the payload of %d bytes", exported, err, len(sp.Data))
	}
	snap := s.NewSnapshot()
	defer snap.Close()
	exported = nil
	if err := snap.ExportTasks(part, []task.ID{sp.ID}, func(r TaskExport) (bool, error) {
		exported = r.Spec
		return true, nil
	}); err != nil || exported == nil || !bytes.Equal(exported.Data, sp.Data) {
		t.Errorf("ExportTasks: %+v, %v; want the payload of %d bytes", exported, err, len(sp.Data))
	}
}

func TestSpecLayout(t *testing.T) {
	s := openLayoutStore(t, vfs.NewMem())
	defer s.Close()
	for i, size := range []int{0, 100, inlinePayloadMax, inlinePayloadMax + 1, 64 << 10} {
		t.Run(fmt.Sprintf("payload=%d", size), func(t *testing.T) {
			sp := layoutSpec(task.MakeID(1_700_000_000_000+int64(i), 1, 1), size)
			b := s.NewBatch()
			if err := b.PutSpec(7, sp); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			checkTask(t, s, 7, sp)
		})
	}
}

// putLayout1 writes sp the way layout 1 did: the spec without payload
// under the spec key, the whole spec under the data key, no mark.
func putLayout1(t *testing.T, s *Store, part uint16, sp *task.Spec) {
	t.Helper()
	meta := *sp
	meta.Data = nil
	mv, err := encode(&meta)
	if err != nil {
		t.Fatal(err)
	}
	wv, err := encode(sp)
	if err != nil {
		t.Fatal(err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(taskKey(kindSpec, part, sp.ID), mv, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(taskKey(kindData, part, sp.ID), wv, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func TestLayoutUpgrade(t *testing.T) {
	fs := vfs.NewMem()
	s := openLayoutStore(t, fs)
	// Layout 1 tasks, more than one upgrade batch of them, with small and
	// large payloads and a state; and, as a crash halfway through an
	// earlier upgrade leaves them, some already in layout 2.
	var specs []*task.Spec
	for i := range 2*upgradeBatchTasks + 10 {
		size := 100
		if i%500 == 0 {
			size = inlinePayloadMax + 1 + i
		}
		sp := layoutSpec(task.MakeID(1_700_000_000_000+int64(i), 1, 1), size)
		part := uint16(i % 3)
		if i%7 == 0 {
			b := s.NewBatch()
			if err := b.PutSpec(part, sp); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		} else {
			putLayout1(t, s, part, sp)
		}
		specs = append(specs, sp)
	}
	st := task.State{Claims: []task.Claim{{Index: 0, Start: 1, End: 2}}}
	b := s.NewBatch()
	if err := b.PutState(1, specs[1].ID, &st); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	// A payload record without a spec record, which layout 1 never left:
	// the upgrade must not bring it back as a task.
	orphan := layoutSpec(task.MakeID(1_600_000_000_000, 1, 1), 10)
	ov, err := encode(orphan)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(taskKey(kindData, 0, orphan.ID), ov, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Delete(layoutKey, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openLayoutStore(t, fs)
	defer s.Close()
	if sv, dv := rawValue(t, s, taskKey(kindSpec, 0, orphan.ID)), rawValue(t, s, taskKey(kindData, 0, orphan.ID)); sv != nil || dv != nil {
		t.Errorf("orphan payload record: spec %v, data %v after the upgrade; want both gone", sv != nil, dv != nil)
	}
	if v := rawValue(t, s, layoutKey); !bytes.Equal(v, []byte{layoutVersion}) {
		t.Fatalf("layout record %v after the upgrade; want [%d]", v, layoutVersion)
	}
	for i, sp := range specs {
		checkTask(t, s, uint16(i%3), sp)
		if t.Failed() {
			t.Fatalf("task %d of %d", i, len(specs))
		}
	}
	var got TaskExport
	if err := s.ExportPartition(1, specs[1].ID, func(r TaskExport) (bool, error) {
		got = r
		return false, nil
	}); err != nil || !reflect.DeepEqual(got.State, st) {
		t.Errorf("state after the upgrade: %+v, %v; want %+v", got.State, err, st)
	}
}

func TestLayoutRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		record []byte
		want   string
	}{
		{"newer", []byte{layoutVersion + 1}, "written by skuldd " + buildinfo.Read().String() + "; this build"},
		{"damaged", []byte{layoutVersion, 0}, "layout record of 2 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := openLayoutStore(t, fs)
			if err := s.db.Set(layoutKey, c.record, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err := Open(Config{Dir: "/db", FS: fs, Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Open: %v; want it to say %q", err, c.want)
			}
		})
	}
}

func TestSpecApartWithoutPayload(t *testing.T) {
	s := openLayoutStore(t, vfs.NewMem())
	defer s.Close()
	sp := layoutSpec(task.MakeID(1_700_000_000_000, 1, 1), inlinePayloadMax+1)
	if err := s.db.Set(taskKey(kindSpec, 2, sp.ID), encodeSpecApart(sp), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FullSpec(2, sp.ID); !errors.Is(err, ErrCorrupt) {
		t.Errorf("FullSpec = %v; want ErrCorrupt", err)
	}
	if err := s.ExportPartition(2, sp.ID, func(TaskExport) (bool, error) { return true, nil }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ExportPartition = %v; want ErrCorrupt", err)
	}
	// A spec marked apart that carries a payload anyway is damaged too.
	bad := append([]byte{specApart}, sp.AppendCBOR(nil)...)
	if err := s.db.Set(taskKey(kindSpec, 2, sp.ID), bad, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Spec(2, sp.ID); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Spec = %v; want ErrCorrupt", err)
	}
}
