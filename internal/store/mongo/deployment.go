package mongo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"
)

// collProcesses holds one document per running herald process (see
// BeatProcess).
const collProcesses = "processes"

// processDoc is a process's document.
type processDoc struct {
	ID        string    `bson:"_id"`
	Host      string    `bson:"host"`
	PID       int       `bson:"pid"`
	Roles     []string  `bson:"roles"`
	Version   string    `bson:"version"`
	StartedAt time.Time `bson:"started_at"`
	SeenAt    time.Time `bson:"seen_at"`
	// SendersJSON keeps the senders as the SQL stores do, in JSON.
	SendersJSON string `bson:"senders"`
}

// PendingStats counts the pending notifications (up to notify.PendingCap)
// and the age of the oldest, from list_status_idx (status, created_at): a
// count that stops after the cap, and the first entry of the range.
func (s *Store) PendingStats(ctx context.Context) (notify.PendingStats, error) {
	var st notify.PendingStats
	filter := bson.D{{Key: "status", Value: string(notify.StatusPending)}}
	n, err := s.n.CountDocuments(ctx, filter, options.Count().SetLimit(notify.PendingCap+1))
	if err != nil {
		return st, fmt.Errorf("pending stats: %w", classify(err))
	}
	st.Pending = n
	if n > notify.PendingCap {
		st.Pending, st.Capped = notify.PendingCap, true
	}
	if n == 0 {
		return st, nil
	}
	var d struct {
		CreatedAt time.Time `bson:"created_at"`
	}
	err = s.n.FindOne(ctx, filter, options.FindOne().SetSort(bson.D{{Key: "status", Value: 1}, {Key: "created_at", Value: 1}}).
		SetProjection(bson.D{{Key: "created_at", Value: 1}})).Decode(&d)
	switch {
	case errors.Is(err, mgo.ErrNoDocuments):
		// Settled since the count.
	case err != nil:
		return st, fmt.Errorf("pending stats: %w", classify(err))
	default:
		st.OldestAge = max(time.Since(d.CreatedAt), 0)
	}
	return st, nil
}

// BeatProcess writes p's document (seen now, by this process's clock) and
// deletes the documents of processes not seen for longer than forget.
func (s *Store) BeatProcess(ctx context.Context, p notify.Process, forget time.Duration) error {
	senders := p.Senders
	if senders == nil {
		senders = []notify.SenderReport{}
	}
	js, err := marshalSenders(senders)
	if err != nil {
		return fmt.Errorf("beat process: %w", err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	roles := p.Roles
	if roles == nil {
		roles = []string{}
	}
	coll := s.db.Collection(collProcesses)
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: p.ID}}, bson.D{
		{Key: "$set", Value: bson.D{{Key: "seen_at", Value: at}, {Key: "senders", Value: js}}},
		{Key: "$setOnInsert", Value: bson.D{{Key: "host", Value: p.Host}, {Key: "pid", Value: p.PID}, {Key: "roles", Value: roles},
			{Key: "version", Value: p.Version}, {Key: "started_at", Value: p.StartedAt.UTC()}}},
	}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("beat process: %w", classify(err))
	}
	if _, err := coll.DeleteMany(ctx, bson.D{{Key: "seen_at", Value: bson.D{{Key: "$lt", Value: at.Add(-forget)}}}}); err != nil {
		return fmt.Errorf("beat process: prune: %w", classify(err))
	}
	return nil
}

// LeaveProcess deletes id's document: the process stops.
func (s *Store) LeaveProcess(ctx context.Context, id string) error {
	if _, err := s.db.Collection(collProcesses).DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
		return fmt.Errorf("leave process: %w", classify(err))
	}
	return nil
}

// Processes lists the processes' documents, oldest start first, each with
// its age by this process's clock.
func (s *Store) Processes(ctx context.Context) ([]notify.Process, error) {
	ds, err := findAll[processDoc](ctx, s.db.Collection(collProcesses), bson.D{},
		options.Find().SetSort(bson.D{{Key: "started_at", Value: 1}, {Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]notify.Process, 0, len(ds))
	for _, d := range ds {
		p := notify.Process{ID: d.ID, Host: d.Host, PID: d.PID, Roles: d.Roles, Version: d.Version,
			StartedAt: d.StartedAt.UTC(), SeenAt: d.SeenAt.UTC(), Age: max(time.Since(d.SeenAt), 0)}
		if p.Senders, err = unmarshalSenders(d.SendersJSON); err != nil {
			return nil, fmt.Errorf("list processes: process %s: senders: %w", d.ID, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func marshalSenders(ss []notify.SenderReport) (string, error) {
	b, err := json.Marshal(ss)
	return string(b), err
}

func unmarshalSenders(s string) ([]notify.SenderReport, error) {
	if s == "" {
		return nil, nil
	}
	var out []notify.SenderReport
	err := json.Unmarshal([]byte(s), &out)
	return out, err
}
