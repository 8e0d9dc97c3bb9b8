//go:build long

package main

import (
	"testing"
	"time"
)

// The provider outages of issue 10 at their own length, with the default
// retry schedule (HERALD_RETRY_DELAY 30s, HERALD_MAX_RETRIES 5). They take
// minutes, so they are built only with the long tag (make test-long); the
// normal run has the same scenarios shortened (provider_test.go). They run
// in parallel with each other.

// 535 for a minute, then the credentials are taken again.
func TestLongProviderAuthRefusedForAMinute(t *testing.T) {
	t.Parallel()
	authRefused(t, time.Minute, 50)
}

// The server down for 3 minutes: no attempt is spent, whatever the length.
func TestLongProviderDownForThreeMinutes(t *testing.T) {
	t.Parallel()
	serverDown(t, 3*time.Minute, 50)
}

// Greylisting for 2 minutes spends retries (30s apart), and the default
// schedule's five of them outlast it.
func TestLongProviderGreylistingForTwoMinutes(t *testing.T) {
	t.Parallel()
	most := greylisted(t, 2*time.Minute, 50)
	t.Logf("observed: greylisting for 2 minutes took up to %d attempts of the 6 the default schedule allows", most)
}

// TestThrottlingProviderNotHammered at the length of the figure:
// 157 MAIL commands for 5 messages in 20 s from the old build.
func TestLongThrottlingProviderNotHammered(t *testing.T) {
	t.Parallel()
	throttled(t, 20*time.Second, 5)
}

// A provider answering 421 to MAIL for a minute (issue 16's figure): the
// MAIL commands it receives.
func TestLongThrottlingForAMinute(t *testing.T) {
	t.Parallel()
	mails := throttled(t, time.Minute, 20)
	t.Logf("observed: %d MAIL commands for 20 messages during a minute of 421", mails)
}
