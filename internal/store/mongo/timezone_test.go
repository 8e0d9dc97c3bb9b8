package mongo

import (
	"os"
	"testing"
	"time"
)

// TestMain runs the package's tests with time.Local in Asia/Kolkata (+05:30,
// not a whole number of hours from UTC), so that a time that leaks the
// process's zone into what the store writes or answers (a status event's
// at, a time formatted without UTC) shows: herald emits every time in UTC
// whatever TZ says.
func TestMain(m *testing.M) {
	loc, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		panic(err)
	}
	time.Local = loc
	os.Exit(m.Run())
}
