package store

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/skuldd/skuldd/task"
)

// The queue index: one empty key per task, kindQueue | part | queue's
// length (one byte) | queue | id, so a partition's tasks of one queue are
// a contiguous range in id order. A listing by queue reads that range and
// the records it names, not the partition (ScanQueue).
//
// Invariant: the index holds exactly one key per stored spec, under the
// spec's queue. PutSpec writes both (a spec never changes its queue, so a
// rewrite sets the same key); DeleteTask deletes both; DropPartition
// drops both ranges; a database from before the index gets it at Open
// (layout 4, buildQueueIndex). TestQueueIndex checks it against a scan.

// queuePrefix is the index range of partition part's tasks of queue.
func queuePrefix(part uint16, queue string) []byte {
	k := partKey(kindQueue, part, 1+len(queue)+task.IDLen)
	k = append(k, byte(len(queue)))
	return append(k, queue...)
}

// queueKey is the index key of task id of queue in partition part.
func queueKey(part uint16, queue string, id task.ID) []byte {
	return append(queuePrefix(part, queue), id[:]...)
}

// putQueueIndex writes sp's index key in b.
func putQueueIndex(b *pebble.Batch, part uint16, sp *task.Spec) error {
	if len(sp.Queue) > task.MaxQueueLen {
		return fmt.Errorf("store: queue name of %d bytes", len(sp.Queue))
	}
	if err := b.Set(queueKey(part, sp.Queue, sp.ID), nil, nil); err != nil {
		return fmt.Errorf("store: put queue index: %w", err)
	}
	return nil
}

// ScanQueue calls fn for every task of queue in partition part after the
// id after (every one for the zero id), in id order (descending with
// desc: those before after), until fn returns false or an error; as
// ScanPartition does, but reading only the queue's tasks: the index range,
// then each task's spec and state.
func (s *Store) ScanQueue(part uint16, queue string, after task.ID, desc bool, fn func(TaskRecord) (bool, error)) error {
	p := queuePrefix(part, queue)
	lo, hi := p, prefixEnd(p)
	if !after.IsZero() {
		if desc {
			hi = queueKey(part, queue, after)
		} else {
			lo = prefixEnd(queueKey(part, queue, after))
		}
	}
	qi, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: scan queue: %w", err)
	}
	defer qi.Close()
	first, next := qi.First, qi.Next
	if desc {
		first, next = qi.Last, qi.Prev
	}
	for first(); qi.Valid(); next() {
		key := qi.Key()
		if len(key) != len(p)+task.IDLen || !bytes.HasPrefix(key, p) {
			return fmt.Errorf("%w: queue index key of %d bytes", ErrCorrupt, len(key))
		}
		id := task.ID(key[len(p):])
		s.scanned.Add(1)
		rec := TaskRecord{Spec: new(task.Spec)}
		v, err := s.get(taskKey(kindSpec, part, id))
		if err != nil {
			return fmt.Errorf("store: scan queue %s of part %d: task %s in the index: %w", queue, part, id, err)
		}
		if rec.PayloadApart, err = decodeSpec(v, rec.Spec); err != nil {
			return fmt.Errorf("part %d: %w", part, err)
		}
		if rec.State, _, err = s.State(part, id); err != nil {
			return err
		}
		more, err := fn(rec)
		if err != nil || !more {
			return err
		}
	}
	return qi.Error()
}

// buildQueueIndex writes the index key of every stored spec: the upgrade
// to layout 4. Setting a key that exists changes nothing, so a crash
// halfway is finished by the next Open.
func (s *Store) buildQueueIndex() (tasks int, err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindSpec}, UpperBound: []byte{kindSpec + 1}})
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	u := s.newUpgradeBatches()
	defer u.close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 3+task.IDLen {
			return tasks, fmt.Errorf("%w: spec key of %d bytes", ErrCorrupt, len(k))
		}
		sp := new(task.Spec)
		if _, err := decodeSpec(it.Value(), sp); err != nil {
			return tasks, fmt.Errorf("task %x: %w", k[3:], err)
		}
		part := uint16(k[1])<<8 | uint16(k[2])
		if err := putQueueIndex(u.batch(), part, sp); err != nil {
			return tasks, err
		}
		tasks++
		if err := u.done(); err != nil {
			return tasks, err
		}
	}
	if err := it.Error(); err != nil {
		return tasks, err
	}
	return tasks, u.flush()
}
