//go:build study

package postgres

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOutboxAtScale is the outbox study at full size (make outbox-study):
// HERALD_STUDY_ROWS outbox rows (default 10,000,000; a few GB of disk in a
// scratch database, dropped at the end, and several minutes to fill) and
// HERALD_STUDY_CALLS timed claims per series (default 300);
// HERALD_STUDY_PROCESSED_BATCHES (default 5, 0: all) bounds the batches of
// pruneProcessed run with the store's plan, which reads the whole outbox per
// batch (see runOutboxStudy). It prints the
// table of figures that docs/benchmarks.md ("Past one database") quotes.
func TestOutboxAtScale(t *testing.T) {
	cfg := studyConfig{Rows: 10_000_000, Calls: 300, ProcessedBatches: 5}
	for name, v := range map[string]*int{"HERALD_STUDY_ROWS": &cfg.Rows, "HERALD_STUDY_CALLS": &cfg.Calls, "HERALD_STUDY_PROCESSED_BATCHES": &cfg.ProcessedBatches} {
		if s := os.Getenv(name); s != "" {
			n, err := strconv.Atoi(s)
			require.NoError(t, err, name)
			*v = n
		}
	}
	rows := runOutboxStudy(t, t.Context(), cfg)
	t.Logf("outbox study, %d rows:\n%s", cfg.Rows, studyTable(rows))
}
