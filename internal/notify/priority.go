package notify

// Priority is how a notification ranks against the others due at the same
// time (issue 34, point 5): a claim takes every due high one before any
// normal one, and every due normal one before any bulk one, so a password
// reset never waits behind a newsletter. Among notifications of one
// priority the order is the due order, as without priorities.
type Priority string

// The priorities; a create without one is normal.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityBulk   Priority = "bulk"
)

// Ranks are the priorities as the stores keep them on the notification
// and on its outbox row: a small integer, lowest first, so that the
// claims' index (rank, available_at, id) gives the claim order. RankCount
// is how many there are: a claim walks one index range per rank.
const (
	RankHigh   = 0
	RankNormal = 1
	RankBulk   = 2
	RankCount  = 3
)

// Rank returns p's rank; "" (no priority given) and an unknown priority
// rank as normal (Validate refuses an unknown one before a store sees it).
func (p Priority) Rank() int {
	switch p {
	case PriorityHigh:
		return RankHigh
	case PriorityBulk:
		return RankBulk
	default:
		return RankNormal
	}
}

// PriorityOfRank returns the priority of a stored rank; an unknown rank
// is normal.
func PriorityOfRank(rank int) Priority {
	switch rank {
	case RankHigh:
		return PriorityHigh
	case RankBulk:
		return PriorityBulk
	default:
		return PriorityNormal
	}
}

// Valid reports whether p may be given on a create: one of the three, or
// "" for the default.
func (p Priority) Valid() bool {
	return p == "" || p == PriorityHigh || p == PriorityNormal || p == PriorityBulk
}

// KnownPriority returns the priority a transport's header or attribute
// names, "" (normal) for anything else: a header is never trusted to be
// one of the three.
func KnownPriority(s string) Priority {
	if p := Priority(s); p == PriorityHigh || p == PriorityBulk {
		return p
	}
	return ""
}

// OrDefault returns p, or normal for "".
func (p Priority) OrDefault() Priority {
	if p == "" {
		return PriorityNormal
	}
	return p
}
