package task

// Record is one task as replication ships it, the one replicated record
// type of skuldd: a leader's write returns it (partition.Write), each
// follower merges it (partition.Replica.Merge), anti-entropy and
// partition transfers carry whole records, and the peer protocol encodes
// it as it is (wire.ReplicateItem). Records come from the network, so
// Merge validates what it relies on.
type Record struct {
	ID ID `cbor:"1,keyasint" json:"id"`
	// Spec is the task's spec with its payload; nil when the receiver is
	// known to hold the task (a spec never changes once written).
	Spec *Spec `cbor:"2,keyasint,omitempty" json:"spec,omitempty"`
	// State is the sender's whole merged state; nil when unchanged.
	State *State `cbor:"3,keyasint,omitempty" json:"state,omitempty"`
	// Updates are progress entries to add to the task's grow-only set.
	Updates []Update `cbor:"4,keyasint,omitempty" json:"updates,omitempty"`
	// Dependents are tasks to add to the grow-only set of those waiting on
	// this one: the reverse dependency edges, kept in this task's
	// partition so its leader can tell them when it completes.
	Dependents []ID `cbor:"5,keyasint,omitempty" json:"dependents,omitempty"`
	// Tomb, when not 0, makes the record a tombstone: the task was
	// garbage-collected or deleted at TombTime(Tomb) (Unix ms) and the
	// record carries nothing else (partition's gc.go). Tomb is negative
	// when the task had been cancelled rather than completed
	// (TombCancelled): a cancelled task satisfies no dependency, also
	// once gone. A replica merging it deletes the task if it holds
	// it and keeps the tombstone; a replica holding a tombstone accepts
	// any other record of the id without writing it.
	Tomb int64 `cbor:"6,keyasint,omitempty" json:"tomb,omitempty"`
	// Meta, on a record without Spec, is the task's spec without its
	// payload: a leader sends it with a claim, so that a replica holding
	// the task untouched (partition's untouchedReadyLocked) indexes the claim
	// without reading its own spec back. A replica that holds the task
	// otherwise ignores it and reads its own.
	Meta *Spec `cbor:"7,keyasint,omitempty" json:"meta,omitempty"`
	// Full says Updates is every update the sender holds for the task
	// (partition.Replica.Records and Export read whole records): a receiver that takes the
	// sender's state in place of its own (partition.Replica.Merge) takes this set in
	// place of its updates too. A record shipped after one write carries
	// only that write's updates and is not Full.
	Full bool `cbor:"8,keyasint,omitempty" json:"full,omitempty"`
}

// Update is one progress entry, keyed (Claim, Seq). A key has one value:
// only claim Claim's holder writes it, and the leader refuses other data
// under a key it holds.
type Update struct {
	Claim uint32 `cbor:"1,keyasint" json:"claim"`
	Seq   uint64 `cbor:"2,keyasint" json:"seq"`
	// Data is not omitempty in CBOR: the peer protocol has always sent
	// the key (null for nil), and Record.AppendCBOR matches the library.
	Data []byte `cbor:"3,keyasint" json:"data,omitempty"`
}

// AppendCBOR appends m's CBOR encoding, the library's bytes, for the
// peer protocol's hand-written replication envelopes; false when m holds
// what only the library encodes (an update with nil Data, which it
// writes as null), and the caller then falls back to the library.
func (m *Record) AppendCBOR(b []byte) ([]byte, bool) {
	n := CountPresent(true, m.Spec != nil, m.State != nil, len(m.Updates) > 0, len(m.Dependents) > 0, m.Tomb != 0, m.Meta != nil, m.Full)
	b = append(b, cborMap|byte(n), 1)
	b = AppendCBORID(b, m.ID)
	if m.Spec != nil {
		b = m.Spec.AppendCBOR(append(b, 2))
	}
	if m.State != nil {
		b = m.State.AppendCBOR(append(b, 3))
	}
	if len(m.Updates) > 0 {
		b = append(b, 4)
		b = AppendCBORHead(b, cborArray, uint64(len(m.Updates)))
		for _, u := range m.Updates {
			if u.Data == nil {
				return b, false
			}
			b = append(b, cborMap|3, 1)
			b = AppendCBORHead(b, cborUint, uint64(u.Claim))
			b = append(b, 2)
			b = AppendCBORHead(b, cborUint, u.Seq)
			b = append(b, 3)
			b = AppendCBORHead(b, cborBytes, uint64(len(u.Data)))
			b = append(b, u.Data...)
		}
	}
	if len(m.Dependents) > 0 {
		b = AppendCBORIDs(append(b, 5), m.Dependents)
	}
	if m.Tomb != 0 {
		b = AppendCBORInt(append(b, 6), m.Tomb)
	}
	if m.Meta != nil {
		b = m.Meta.AppendCBOR(append(b, 7))
	}
	if m.Full {
		b = append(b, 8, cborTrue)
	}
	return b, true
}

// DecodeCBOR decodes a record in the form AppendCBOR writes from r.
func (m *Record) DecodeCBOR(r *CBORReader) {
	r.Fields(8, func(k uint64) {
		switch k {
		case 1:
			m.ID = r.ID()
		case 2:
			m.Spec = new(Spec)
			m.Spec.DecodeCBOR(r)
		case 3:
			m.State = new(State)
			m.State.DecodeCBOR(r)
		case 4:
			m.Updates = ReadList(r, (*Update).decodeCBOR)
		case 5:
			m.Dependents = r.IDs()
		case 6:
			m.Tomb = r.Int64()
		case 7:
			m.Meta = new(Spec)
			m.Meta.DecodeCBOR(r)
		case 8:
			m.Full = r.Bool()
		}
	})
}

func (u *Update) decodeCBOR(r *CBORReader) {
	r.Fields(3, func(k uint64) {
		switch k {
		case 1:
			u.Claim = r.Uint32()
		case 2:
			u.Seq = r.Uint64()
		case 3:
			u.Data = r.Bytes()
		}
	})
}

// TombOf is the Tomb of a task collected or deleted at at (Unix ms, > 0):
// negated when the task had been cancelled, not completed.
func TombOf(at int64, cancelled bool) int64 {
	if cancelled {
		return -at
	}
	return at
}

// TombTime returns the deletion time of a tombstone's Tomb.
func TombTime(tomb int64) int64 {
	if tomb < 0 {
		return -tomb
	}
	return tomb
}

// TombCancelled reports whether a tombstone's task had been cancelled.
func TombCancelled(tomb int64) bool { return tomb < 0 }

// TombLess orders two tombstones of one task: the earlier deletion time
// first, and on a tie the cancelled one (the safer answer to a dependent),
// so replicas that merge both keep the same one.
func TombLess(a, b int64) bool {
	if ta, tb := TombTime(a), TombTime(b); ta != tb {
		return ta < tb
	}
	return a < b
}
