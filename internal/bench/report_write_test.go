package bench_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/bench"
)

// TestReportWriteErrors checks that each report's writers name the report
// in the error of a writer that fails, and wrap that error.
func TestReportWriteErrors(t *testing.T) {
	boom := errors.New("boom")
	failing := writerFunc(func([]byte) (int, error) { return 0, boom })
	for _, c := range []struct {
		what        string
		json, plain func() error
	}{
		{"report", func() error { return bench.Report{}.WriteJSON(failing) }, func() error { return bench.Report{}.WriteText(failing) }},
		{"broadcast report", func() error { return bench.BroadcastReport{}.WriteJSON(failing) }, func() error { return bench.BroadcastReport{}.WriteText(failing) }},
		{"rate search", func() error { return bench.RateSearch{}.WriteJSON(failing) }, func() error { return bench.RateSearch{}.WriteText(failing) }},
	} {
		for _, err := range []error{c.json(), c.plain()} {
			require.ErrorIs(t, err, boom, c.what)
			require.EqualError(t, err, "write "+c.what+": boom")
		}
	}
}
