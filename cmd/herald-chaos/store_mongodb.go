package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	mopts "go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/proctest"
)

// mongoDatabase is the MongoDB database herald uses in the mongodb run.
const mongoDatabase = "herald"

// ferret is the mongodb run's FerretDB: a process of the harness's own
// (./cmd/herald-chaos/ferretdb) over the run's scratch PostgreSQL
// database, which the ferretdb-restart fault kills with SIGKILL and
// starts again on the same data and port.
type ferret struct {
	service
	bin   string
	addr  string
	pgURL string
	dir   string
}

// buildFerret compiles ./cmd/herald-chaos/ferretdb into dir.
func buildFerret(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root (go env GOMOD): %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("build ferretdb inside the herald module: go env GOMOD is empty")
	}
	bin := filepath.Join(dir, "ferretdb")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/herald-chaos/ferretdb")
	cmd.Dir = filepath.Dir(gomod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/herald-chaos/ferretdb: %w\n%s", err, b)
	}
	return bin, nil
}

// start runs FerretDB and waits until it answers a ping.
func (f *ferret) start(ctx context.Context) error {
	p, err := proctest.Start(proctest.Spec{
		Bin:     f.bin,
		Args:    []string{"--listen", f.addr, "--postgresql-url", f.pgURL},
		Name:    "ferretdb",
		LogFile: filepath.Join(f.dir, fmt.Sprintf("ferretdb-%s.log", time.Now().Format("150405.000"))),
	})
	if err != nil {
		return fmt.Errorf("start ferretdb: %w", err)
	}
	f.p = p
	return waitStarted(ctx, p, 60*time.Second, 100*time.Millisecond, func() bool { return pingMongo(ctx, "mongodb://"+f.addr+"/") == nil })
}

func pingMongo(ctx context.Context, uri string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := mgo.Connect(mopts.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
	if err != nil {
		return err
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	return c.Ping(ctx, nil)
}

// mongoView is the MongoDB store: FerretDB of the run's own over the
// scratch database, and the notifications collection the checks read.
type mongoView struct {
	ferret *ferret
	coll   *mgo.Collection
}

// openMongo is the mongodb row's open: it starts the run's FerretDB over
// the scratch database and points herald at it; the harness reads the
// collections through a client of its own.
func openMongo(ctx context.Context, h *harness) (storeView, error) {
	bin, err := buildFerret(ctx, h.dir)
	if err != nil {
		return nil, err
	}
	addr, err := proctest.FreeAddr()
	if err != nil {
		return nil, err
	}
	v := &mongoView{ferret: &ferret{bin: bin, addr: addr, pgURL: h.directDB, dir: h.dir}}
	began := time.Now()
	if err := v.ferret.start(ctx); err != nil {
		return nil, err
	}
	h.cleanups = append(h.cleanups, v.ferret.stop)
	h.logf("FerretDB of its own on %s (PostgreSQL handler, database %s), up in %.1fs", addr, h.dbName, time.Since(began).Seconds())
	uri := "mongodb://" + addr + "/" + mongoDatabase
	h.env["HERALD_DATABASE_URL"] = uri
	c, err := mgo.Connect(mopts.Client().ApplyURI(uri).SetServerSelectionTimeout(5 * time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to FerretDB: %w", err)
	}
	h.cleanups = append(h.cleanups, func() { _ = c.Disconnect(context.Background()) })
	v.coll = c.Database(mongoDatabase).Collection("notifications")
	return v, nil
}

// ferretRestart kills FerretDB with SIGKILL under the running herald and
// starts it again on the same port and data. A worker's record cut by the
// kill after its send repeats the send.
func (h *harness) ferretRestart(ctx context.Context) (string, int, error) {
	f := h.st.(*mongoView).ferret
	began := time.Now()
	f.kill()
	_ = sleep(ctx, brokerPause)
	if err := f.start(context.WithoutCancel(ctx)); err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("FerretDB killed -9, answering again after %.1fs", time.Since(began).Seconds()),
		len(h.workers) * prefetch, nil
}

// mongoNote is what the checks read of a notification document (the
// store's layout: internal/store/mongo's doc).
type mongoNote struct {
	ID             int64  `bson:"id"`
	Status         string `bson:"status"`
	Attempts       int    `bson:"attempts"`
	IdempotencyKey string `bson:"idempotency_key"`
	Open           int    `bson:"open"`
	Events         []struct {
		ID          int64      `bson:"id"`
		Type        string     `bson:"type"`
		ProcessedAt *time.Time `bson:"processed_at"`
		LastError   string     `bson:"last_error"`
	} `bson:"events"`
	History []struct {
		Outcome string `bson:"outcome"`
		Error   string `bson:"error"`
	} `bson:"history"`
}

// notes reads every notification document.
func (v *mongoView) notes(ctx context.Context) ([]mongoNote, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cur, err := v.coll.Find(ctx, bson.D{}, mopts.Find().SetProjection(bson.D{
		{Key: "id", Value: 1}, {Key: "status", Value: 1}, {Key: "attempts", Value: 1},
		{Key: "idempotency_key", Value: 1}, {Key: "open", Value: 1}, {Key: "events", Value: 1}, {Key: "history", Value: 1},
	}))
	if err != nil {
		return nil, fmt.Errorf("read notifications: %w", err)
	}
	var out []mongoNote
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read notifications: %w", err)
	}
	return out, nil
}

// drained: no open event, no accepted or smtp-drop notification pending.
func (v *mongoView) drained(ctx context.Context, ids, drops []int64) (bool, string) {
	// Only the documents with work left, and only what the check needs:
	// the poll runs every 500ms against a FerretDB that reads whatever
	// it filters.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cur, err := v.coll.Find(ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "status", Value: string(notify.StatusPending)}},
		bson.D{{Key: "open", Value: bson.D{{Key: "$gt", Value: 0}}}},
	}}}, mopts.Find().SetProjection(bson.D{{Key: "id", Value: 1}, {Key: "status", Value: 1}, {Key: "open", Value: 1}}))
	if err != nil {
		return false, "read notifications: " + err.Error()
	}
	var notes []mongoNote
	if err := cur.All(ctx, &notes); err != nil {
		return false, "read notifications: " + err.Error()
	}
	want := map[int64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	dropSet := map[int64]bool{}
	for _, id := range drops {
		dropSet[id] = true
	}
	var unprocessed, pending, dropsPending int
	for _, n := range notes {
		unprocessed += n.Open
		if n.Status == string(notify.StatusPending) {
			if want[n.ID] {
				pending++
			}
			if dropSet[n.ID] {
				dropsPending++
			}
		}
	}
	if unprocessed > 0 || pending > 0 || dropsPending > 0 {
		return false, fmt.Sprintf("%d unprocessed events, %d accepted notifications pending, %d of %d smtp-drop notifications pending",
			unprocessed, pending, dropsPending, len(drops))
	}
	return true, ""
}

// states reads the status and attempts of the notifications ids, and
// nothing else of their documents (smtp-drop polls it every 250ms).
func (v *mongoView) states(ctx context.Context, ids []int64) (map[int64]string, map[int64]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cur, err := v.coll.Find(ctx, bson.D{{Key: "id", Value: bson.D{{Key: "$in", Value: ids}}}},
		mopts.Find().SetProjection(bson.D{{Key: "id", Value: 1}, {Key: "status", Value: 1}, {Key: "attempts", Value: 1}}))
	if err != nil {
		return nil, nil, fmt.Errorf("read notifications: %w", err)
	}
	var notes []mongoNote
	if err := cur.All(ctx, &notes); err != nil {
		return nil, nil, fmt.Errorf("read notifications: %w", err)
	}
	status, attempts := map[int64]string{}, map[int64]int{}
	for _, n := range notes {
		status[n.ID], attempts[n.ID] = n.Status, n.Attempts
	}
	return status, attempts, nil
}

// deadLetters are the events finished with a reason, unless their
// notification was sent.
func (v *mongoView) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	notes, err := v.notes(ctx)
	if err != nil {
		return nil, 0, err
	}
	ids := map[int64]bool{}
	n := 0
	for _, d := range notes {
		for _, e := range d.Events {
			if e.ProcessedAt == nil || e.LastError == "" {
				continue
			}
			if d.Status == string(notify.StatusSent) && e.Type == notify.EventRequested {
				continue
			}
			ids[e.ID] = true
			n++
		}
	}
	return ids, n, nil
}

// tally reads the documents once, and counts unprocessed and failed from
// them.
func (v *mongoView) tally(ctx context.Context, drops []int64) (*tally, error) {
	notes, err := v.notes(ctx)
	if err != nil {
		return nil, err
	}
	t := &tally{byKey: map[string]row{}}
	for _, n := range notes {
		t.unprocessed += n.Open
		if n.Status == "failed" {
			t.failed++
			if !slices.Contains(drops, n.ID) {
				t.otherFailed++
			}
		}
		if n.IdempotencyKey == "" {
			t.keyless++
			continue
		}
		t.byKey[n.IdempotencyKey] = row{id: n.ID, status: n.Status}
	}
	return t, nil
}

// events returns the ids of every event of the notifications ids.
func (v *mongoView) events(ctx context.Context, ids []int64) (map[int64]bool, error) {
	notes, err := v.notes(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int64]bool{}
	for _, n := range notes {
		if slices.Contains(ids, n.ID) {
			for _, e := range n.Events {
				out[e.ID] = true
			}
		}
	}
	return out, nil
}

func (v *mongoView) throttleSpent(ctx context.Context) (int, error) {
	notes, err := v.notes(ctx)
	if err != nil {
		return 0, err
	}
	spent := 0
	for _, n := range notes {
		for _, a := range n.History {
			if a.Outcome != "deferred" && strings.Contains(a.Error, throttleMarker) {
				spent++
			}
		}
	}
	return spent, nil
}

// conns is -1: the scratch database's connections are FerretDB's, not
// herald's.
func (v *mongoView) conns(context.Context) int { return -1 }
